// Utf8Stream, and llama2.c's tokenizer.bin behind the TextTokenizer interface.
#include "tokenizers/text_tokenizer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "tokenizers/tokenizer.h"
#include "tokenizers/utf8.h"

namespace minfer {

namespace {

std::string too_many_tokens_message(size_t max_ids, size_t text_bytes, size_t bytes_per_token) {
  if (bytes_per_token == 0) return detail::concat("the text has more than ", max_ids, " tokens");
  return detail::concat("a text of ", text_bytes, " bytes has more than ", max_ids,
                        " tokens (no token stands for more than ", bytes_per_token, " bytes)");
}

}  // namespace

TooManyTokens::TooManyTokens(size_t max_ids_, size_t text_bytes_, size_t bytes_per_token_)
    : Error(too_many_tokens_message(max_ids_, text_bytes_, bytes_per_token_)),
      max_ids(max_ids_),
      text_bytes(text_bytes_),
      bytes_per_token(bytes_per_token_) {}

void check_text_bytes(size_t text_bytes, size_t max_ids, size_t bytes_per_token) {
  // text_bytes > max_ids * bytes_per_token, without the product.
  if (bytes_per_token > 0 && text_bytes > 0 && (text_bytes - 1) / bytes_per_token >= max_ids)
    throw TooManyTokens(max_ids, text_bytes, bytes_per_token);
}

std::vector<int32_t> TextTokenizer::encode_spans(const std::vector<TextSpan>& spans, const std::vector<int32_t>&,
                                                size_t max_ids) const {
  std::string text;
  for (const TextSpan& span : spans) text += span.text;
  return encode(text, false, max_ids);  // a tokenizer without special tokens in text (llama2.c's)
}

std::vector<int32_t> TextTokenizer::encode_plain(const std::string& text, bool add_special, size_t max_ids) const {
  return encode(text, add_special, max_ids);  // a tokenizer without special tokens in text (llama2.c's)
}

std::string Utf8Stream::push(const std::string& bytes) {
  pending_ += bytes;
  const size_t hold = utf8::unfinished_tail(pending_);
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string Utf8Stream::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

namespace {

class Llama2cTokenizer : public TextTokenizer {
 public:
  Llama2cTokenizer(Tokenizer tokenizer, std::string source)
      : tokenizer_(std::move(tokenizer)), source_(std::move(source)) {
    // Every token is a piece, or one byte of byte fallback; the text only grows by the dummy
    // prefix's space.
    for (int32_t id = 0; id < tokenizer_.vocab_size(); ++id)
      longest_piece_ = std::max(longest_piece_, tokenizer_.piece(id).size());
    longest_piece_ = std::max<size_t>(longest_piece_, 1);
  }

  int64_t vocab_size() const override { return tokenizer_.vocab_size(); }
  // note: run.c's encode is one merge over the whole text (tokenizers/tokenizer.h): a text that
  // passes the length check is encoded whole, and its ids counted after.
  std::vector<int32_t> encode(const std::string& text, bool add_special, size_t max_ids) const override {
    check_text_bytes(std::strlen(text.c_str()), max_ids, longest_piece_);
    std::vector<int32_t> ids = tokenizer_.encode(text, add_special, false);
    if (ids.size() > max_ids) throw TooManyTokens(max_ids, text.size(), 0);
    return ids;
  }
  size_t max_bytes_per_token() const override { return longest_piece_; }
  // run.c prints the pieces one after another; the text is their bytes.
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) out += token_bytes(i ? ids[i - 1] : -1, ids[i]);
    return out;
  }
  std::string token_bytes(int32_t prev, int32_t id) const override {
    MINFER_CHECK(prev >= -1 && prev < vocab_size(), source_, ": token id ", prev, " outside [0, ", vocab_size(), ")");
    // note: a stream's first token (prev -1) is taken as following BOS, whose successor run.c
    // prints without its leading space, as SentencePiece's decode does at the start of a text.
    return tokenizer_.decode(prev == -1 ? 1 : prev, id);
  }
  int32_t bos_id() const override { return 1; }
  std::vector<int32_t> eos_ids() const override { return {2}; }
  std::string describe() const override {
    return "llama2.c tokenizer.bin, " + std::to_string(tokenizer_.vocab_size()) + " tokens";
  }

 private:
  Tokenizer tokenizer_;
  std::string source_;
  size_t longest_piece_ = 0;  // bytes
};

}  // namespace

std::unique_ptr<TextTokenizer> load_llama2c_tokenizer(const std::string& path) {
  return std::make_unique<Llama2cTokenizer>(Tokenizer::load(path), path);
}

}  // namespace minfer
