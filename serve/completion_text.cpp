#include "serve/completion_text.h"

#include <algorithm>

#include "tokenizers/utf8.h"

namespace minfer::serve {

StopMatcher::StopMatcher(std::vector<std::string> stops, size_t longest_piece) : stops_(std::move(stops)) {
  size_t longest = 0;
  for (const auto& s : stops_) longest = std::max(longest, s.size());
  keep_ = longest > 0 ? longest - 1 : 0;
  window_.reserve(keep_ + longest_piece + 1);
}

bool StopMatcher::push(const std::string& piece) {
  // note: a stop string found now ends inside `piece`: the kept bytes alone are shorter than any.
  window_.append(piece);
  for (const auto& s : stops_)
    if (window_.find(s) != std::string::npos) return true;
  if (window_.size() > keep_) window_.erase(0, window_.size() - keep_);
  return false;
}

size_t find_stop(const std::string& text, const std::vector<std::string>& stops) {
  size_t at = std::string::npos;
  for (const auto& s : stops) at = std::min(at, text.find(s));
  return at;
}

size_t stop_prefix_at_end(const std::string& text, const std::vector<std::string>& stops) {
  size_t longest = 0;
  for (const auto& s : stops) longest = std::max(longest, s.size());
  for (size_t k = std::min(text.size(), longest > 0 ? longest - 1 : 0); k > 0; --k)
    for (const auto& s : stops)
      if (s.size() > k && text.compare(text.size() - k, k, s, 0, k) == 0) return k;
  return 0;
}

TokenPieces::TokenPieces(const TextTokenizer& tokenizer) : bos_(tokenizer.bos_id()) {
  const int64_t n = tokenizer.vocab_size();
  const int32_t other = bos_ == 0 && n > 1 ? 1 : 0;  // any token but BOS
  after_token_.reserve(static_cast<size_t>(n));
  byte_fallback_.resize(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    byte_fallback_[static_cast<size_t>(id)] = tokenizer.byte_fallback(id);
    after_token_.push_back(tokenizer.token_bytes(other, id));
    longest_ = std::max(longest_, after_token_.back().size());
  }
  if (bos_ < 0 || bos_ >= n) return;
  std::vector<std::string> after_bos;
  after_bos.reserve(static_cast<size_t>(n));
  bool differs = false;
  for (int32_t id = 0; id < n; ++id) {
    after_bos.push_back(tokenizer.token_bytes(bos_, id));
    differs = differs || after_bos.back() != after_token_[static_cast<size_t>(id)];
    longest_ = std::max(longest_, after_bos.back().size());
  }
  if (differs) after_bos_ = std::move(after_bos);
}

const std::string& TokenPieces::piece(int32_t prev, int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= after_token_.size()) return none_;
  if (prev == bos_ && !after_bos_.empty()) return after_bos_[static_cast<size_t>(id)];
  return after_token_[static_cast<size_t>(id)];
}

CompletionText::CompletionText(const TokenPieces* pieces, int32_t prompt_last, std::vector<std::string> stops)
    : pieces_(pieces), prev_(prompt_last), stops_(std::move(stops)) {}

std::string CompletionText::push(int32_t id) {
  if (stopped_ || pieces_ == nullptr) return {};
  const std::string& piece = pieces_->piece(prev_, id);
  prev_ = id;
  if (pieces_->byte_fallback(id)) {
    run_ += piece;
    ++run_tokens_;
    return {};
  }
  return take(end_run() + piece);
}

std::string CompletionText::end_run() {
  std::string text;
  if (utf8::is_valid(run_)) {
    text = std::move(run_);
  } else {
    for (size_t i = 0; i < run_tokens_; ++i) text += "\xEF\xBF\xBD";
  }
  run_.clear();
  run_tokens_ = 0;
  return text;
}

std::string CompletionText::take(const std::string& bytes) {
  held_ += utf8_.push(bytes);
  const size_t at = find_stop(held_, stops_);
  if (at != std::string::npos) {
    std::string out = held_.substr(0, at);
    held_.clear();
    stopped_ = true;
    return utf8::lossy(out);
  }
  const size_t keep = stop_prefix_at_end(held_, stops_);
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return utf8::lossy(out);
}

std::string CompletionText::finish() {
  if (stopped_) return {};
  std::string out = take(end_run());
  if (stopped_) return out;
  out += utf8::lossy(held_ + utf8_.flush());
  held_.clear();
  return out;
}

}  // namespace minfer::serve
