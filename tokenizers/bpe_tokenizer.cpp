#include "tokenizers/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <optional>
#include <unordered_map>

#include "core/error.h"
#include "tokenizers/bpe.h"
#include "tokenizers/piece_split.h"
#include "tokenizers/utf8.h"

namespace minfer {

namespace {

constexpr size_t kMaxTokens = size_t(1) << 22;

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes for
// U+0100.. in byte order.
struct ByteLevelTable {
  std::array<std::string, 256> text;
  std::unordered_map<uint32_t, unsigned char> byte_of;  // code point -> byte
  ByteLevelTable() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? b : next++;
      text[b] = utf8::encode(cp);
      byte_of[cp] = static_cast<unsigned char>(b);
    }
  }
};
const ByteLevelTable& byte_level_table() {
  static const ByteLevelTable table;
  return table;
}

// "<0xXX>" -> XX as the tokenizers library's ByteFallback decoder reads it (u8::from_str_radix
// on the two characters, which accepts a leading '+'); -1 otherwise.
int byte_piece_value(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  auto digit = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = digit(token[3]), lo = digit(token[4]);
  if (token[3] == '+' && lo >= 0) return lo;
  return hi >= 0 && lo >= 0 ? hi * 16 + lo : -1;
}

std::string replace_all(const std::string& text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = text.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(text, pos, hit - pos);
    out += to;
  }
  out.append(text, pos, std::string::npos);
  return out;
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.size() >= prefix.size() && text.compare(0, prefix.size(), prefix) == 0;
}

struct Segment {
  std::string text;
  int32_t token;  // an added token, or -1 for text
  bool at_start;
  size_t offset = 0;  // where the text starts in the text given to encode (before normalizing)
};

// Where special tokens may be cut out of a text: everywhere (encode), or only inside the bytes a
// mask marks (encode_spans: a chat template's own text, never a message's). `markers` are added
// tokens held to the mask as well though the tokenizer does not call them special (a template's
// markers that a fine-tune added as ordinary tokens).
struct SpecialScope {
  const std::vector<char>* mask = nullptr;  // one flag per byte of the text; nullptr: `all` says
  bool all = true;
  const std::vector<int32_t>* markers = nullptr;  // sorted
  bool guarded(const AddedToken& t) const {
    return t.special || (markers != nullptr && std::binary_search(markers->begin(), markers->end(), t.id));
  }
  bool allows(size_t begin, size_t end) const {
    if (mask == nullptr) return all;
    for (size_t i = begin; i < end; ++i)
      if (!(*mask)[i]) return false;
    return true;
  }
};

// Where the white space at the end of text[0, end) begins (char::is_whitespace).
size_t trailing_space_begin(const std::string& text, size_t end) {
  size_t begin = end;
  while (begin > 0) {
    size_t back = 1;  // find the start of the previous character
    while (back < 4 && back < begin && (static_cast<unsigned char>(text[begin - back]) & 0xC0) == 0x80) ++back;
    size_t length = 0;
    const uint32_t cp = utf8::decode_at(text, begin - back, &length);
    if (length != back || !utf8::is_whitespace(cp)) break;
    begin -= back;
  }
  return begin;
}

size_t leading_space_end(const std::string& text, size_t begin) {
  size_t end = begin;
  while (end < text.size()) {
    size_t length = 0;
    const uint32_t cp = utf8::decode_at(text, end, &length);
    if (!utf8::is_whitespace(cp)) break;
    end += length;
  }
  return end;
}

class BpeTokenizer : public TextTokenizer {
 public:
  explicit BpeTokenizer(BpeSpec spec);

  int64_t vocab_size() const override { return static_cast<int64_t>(spec_.tokens.size()); }
  std::vector<int32_t> encode(const std::string& text, bool add_special, size_t max_ids) const override;
  std::vector<int32_t> encode_spans(const std::vector<TextSpan>& spans, const std::vector<int32_t>& markers,
                                    size_t max_ids) const override;
  std::vector<int32_t> encode_plain(const std::string& text, bool add_special, size_t max_ids) const override;
  size_t max_bytes_per_token() const override { return max_bytes_per_token_; }
  std::string chat_template() const override {
    if (!spec_.chat_template_error.empty()) fail(spec_.chat_template_error);
    return spec_.chat_template;
  }
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string token_bytes(int32_t prev, int32_t id) const override;
  bool byte_fallback(int32_t id) const override;
  std::vector<int32_t> special_token_ids() const override {
    std::vector<int32_t> ids;
    for (const AddedToken& t : spec_.added)
      if (t.special) ids.push_back(t.id);
    return ids;
  }
  int32_t bos_id() const override { return spec_.bos; }
  std::vector<int32_t> eos_ids() const override { return spec_.eos; }
  std::string describe() const override { return spec_.description; }

 private:
  std::vector<Segment> split_added(const std::string& text, const SpecialScope& scope) const;
  std::vector<Segment> split_leftmost_longest(const Segment& segment, bool normalized_tokens,
                                              const SpecialScope& scope) const;
  std::vector<Segment> split_longest_first(const std::string& text, const SpecialScope& scope) const;
  // encode's ids, with special tokens cut out of the text where `scope` allows.
  std::vector<int32_t> encode_scoped(const std::string& text, bool add_special, const SpecialScope& scope,
                                     size_t max_ids) const;
  // Appends the ids of `text`, piece by piece; throws TooManyTokens once there are more than max_ids.
  void encode_segments(const std::string& text, const SpecialScope& scope, size_t max_ids,
                       std::vector<int32_t>& ids) const;
  SpecialScope normalize_segment(Segment* segment, const SpecialScope& scope, std::vector<char>* mask) const;
  std::string normalize(const std::string& text) const;
  // The pre-tokenizer's steps from `step_index` on `piece`: each final piece goes to `emit` as soon
  // as it is made, so that the work held is one piece's per step, never a list of the text's pieces.
  void pre_tokenize(Piece piece, size_t step_index, const PieceSink& emit) const;
  size_t bytes_per_token_bound() const;
  void encode_piece(const std::string& piece, std::vector<int32_t>& ids) const;
  int32_t lookup(const std::string& text) const {
    auto it = by_text_.find(text);
    return it == by_text_.end() ? -1 : it->second;
  }
  void check_id(int32_t id) const {
    MINFER_CHECK(id >= 0 && id < vocab_size(), spec_.source, ": token id ", id, " outside [0, ", vocab_size(), ")");
  }
  // The decoder on `tokens`; `first` says the first of them starts the text; `lossy` replaces
  // invalid UTF-8 as the library does (decode) or keeps the raw bytes (token_bytes).
  std::string run_decoder(std::vector<std::string> tokens, bool first, bool lossy) const;

  BpeSpec spec_;
  std::unordered_map<std::string, int32_t> by_text_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left, right) -> (rank, merged)
  std::array<int32_t, 256> byte_piece_{};                              // byte -> <0xXX> token, or -1
  // Added tokens by first byte, longest first; the first pass (non-normalized) and the second.
  std::array<std::vector<const AddedToken*>, 256> added_raw_, added_normalized_;
  std::vector<const AddedToken*> added_by_length_;  // llama.cpp's order
  std::vector<std::string> added_normalized_content_;
  size_t max_bytes_per_token_ = 0;  // bytes_per_token_bound()
};

BpeTokenizer::BpeTokenizer(BpeSpec spec) : spec_(std::move(spec)) {
  const std::string& src = spec_.source;
  const size_t n = spec_.tokens.size();
  MINFER_CHECK(n > 0, src, ": the vocabulary is empty");
  MINFER_CHECK(n <= kMaxTokens, src, ": ", n, " tokens is more than the limit of ", kMaxTokens);
  MINFER_CHECK(spec_.rule != MergeRule::scored || spec_.scores.size() == n, src, ": ", spec_.scores.size(),
               " scores for ", n, " tokens");
  MINFER_CHECK(spec_.decode_verbatim.empty() || spec_.decode_verbatim.size() == n, src, ": ",
               spec_.decode_verbatim.size(), " decode flags for ", n, " tokens");
  auto valid = [&](int32_t id) { return id >= 0 && static_cast<size_t>(id) < n; };
  by_text_.reserve(n);
  for (size_t i = 0; i < n; ++i) by_text_[spec_.tokens[i]] = static_cast<int32_t>(i);  // of equals the last
  for (const AddedToken& t : spec_.added) {
    MINFER_CHECK(valid(t.id), src, ": added token '", t.content, "' has id ", t.id, " outside [0, ", n, ")");
    MINFER_CHECK(!t.content.empty(), src, ": added token ", t.id, " is empty");
  }
  for (size_t r = 0; r < spec_.merges.size(); ++r) {
    const BpeSpec::Merge& m = spec_.merges[r];
    MINFER_CHECK(valid(m.left) && valid(m.right) && valid(m.merged), src, ": merge ", r, " names a token id outside [0, ", n, ")");
    const uint64_t key = (uint64_t(uint32_t(m.left)) << 32) | uint32_t(m.right);
    merges_.emplace(key, std::make_pair(static_cast<int32_t>(r), m.merged));
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_piece_[b] = lookup(name);
  }
  for (int32_t id : spec_.prefix) check_id(id);
  for (int32_t id : spec_.suffix) check_id(id);
  for (int32_t id : spec_.eos) check_id(id);
  MINFER_CHECK(spec_.bos == -1 || valid(spec_.bos), src, ": BOS id ", spec_.bos, " outside [0, ", n, ")");
  MINFER_CHECK(spec_.unk_id == -1 || valid(spec_.unk_id), src, ": unknown-token id ", spec_.unk_id, " outside [0, ", n, ")");

  added_normalized_content_.resize(spec_.added.size());
  for (size_t i = 0; i < spec_.added.size(); ++i) {
    const AddedToken& t = spec_.added[i];
    added_by_length_.push_back(&t);
    if (spec_.match == AddedTokenMatch::leftmost_longest && t.normalized) {
      // The library matches a normalized token by its normalized content.
      added_normalized_content_[i] = normalize(t.content);
      if (!added_normalized_content_[i].empty())
        added_normalized_[static_cast<unsigned char>(added_normalized_content_[i][0])].push_back(&t);
    } else {
      added_normalized_content_[i] = t.content;
      added_raw_[static_cast<unsigned char>(t.content[0])].push_back(&t);
    }
  }
  auto content_of = [&](const AddedToken* t) -> const std::string& {
    return added_normalized_content_[static_cast<size_t>(t - spec_.added.data())];
  };
  auto longest_first = [&](const AddedToken* a, const AddedToken* b) {
    return content_of(a).size() > content_of(b).size();
  };
  for (auto& bucket : added_raw_) std::stable_sort(bucket.begin(), bucket.end(), longest_first);
  for (auto& bucket : added_normalized_) std::stable_sort(bucket.begin(), bucket.end(), longest_first);
  std::stable_sort(added_by_length_.begin(), added_by_length_.end(), longest_first);
  max_bytes_per_token_ = bytes_per_token_bound();
}

std::string BpeTokenizer::normalize(const std::string& text) const {
  std::string out = text;
  for (const NormalizeStep& step : spec_.normalizer) {
    if (step.kind == NormalizeStep::Kind::prepend) {
      if (!out.empty()) out = step.text + out;
    } else {
      out = replace_all(out, step.text, step.replacement);
    }
  }
  return out;
}

// The tokenizers library's AddedVocabulary::find_matches on one segment: at each position the
// longest token that starts there, leftmost first; lstrip/rstrip swallow adjacent white space.
// `scope` is over segment.text's bytes.
std::vector<Segment> BpeTokenizer::split_leftmost_longest(const Segment& segment, bool normalized_tokens,
                                                          const SpecialScope& scope) const {
  const auto& buckets = normalized_tokens ? added_normalized_ : added_raw_;
  const std::string& text = segment.text;
  std::vector<Segment> out;
  size_t start_offset = 0;  // the end of the last match (with what rstrip swallowed)
  for (size_t pos = 0; pos < text.size();) {
    const AddedToken* found = nullptr;
    for (const AddedToken* t : buckets[static_cast<unsigned char>(text[pos])]) {
      const std::string& content = added_normalized_content_[static_cast<size_t>(t - spec_.added.data())];
      if (text.compare(pos, content.size(), content) == 0 &&
          (!scope.guarded(*t) || scope.allows(pos, pos + content.size()))) {
        found = t;
        break;
      }
    }
    if (found == nullptr) {
      ++pos;
      continue;
    }
    const size_t length = added_normalized_content_[static_cast<size_t>(found - spec_.added.data())].size();
    size_t begin = pos, end = pos + length;
    if (found->lstrip) begin = std::max(trailing_space_begin(text, begin), start_offset);
    if (found->rstrip) end = leading_space_end(text, end);
    if (begin > start_offset)
      out.push_back({text.substr(start_offset, begin - start_offset), -1, segment.at_start && start_offset == 0,
                     segment.offset + start_offset});
    out.push_back({std::string(), found->id, false});
    start_offset = end;
    pos = end;
  }
  if (start_offset < text.size() || text.empty())
    out.push_back({text.substr(start_offset), -1, segment.at_start && start_offset == 0, segment.offset + start_offset});
  return out;
}

// llama.cpp's tokenizer_st_partition: each token, longest first, is cut out of every text
// fragment where it occurs.
std::vector<Segment> BpeTokenizer::split_longest_first(const std::string& text, const SpecialScope& scope) const {
  std::vector<Segment> fragments;
  if (!text.empty()) fragments.push_back({text, -1, true, 0});
  for (const AddedToken* t : added_by_length_) {
    std::vector<Segment> next;
    next.reserve(fragments.size());
    for (Segment& f : fragments) {
      if (f.token >= 0 || f.text.find(t->content) == std::string::npos) {
        next.push_back(std::move(f));
        continue;
      }
      size_t pos = 0;
      for (size_t hit = 0; (hit = f.text.find(t->content, hit)) != std::string::npos;) {
        if (scope.guarded(*t) && !scope.allows(f.offset + hit, f.offset + hit + t->content.size())) {
          ++hit;  // written where special tokens are text: not this token
          continue;
        }
        if (hit > pos) next.push_back({f.text.substr(pos, hit - pos), -1, f.at_start && pos == 0, f.offset + pos});
        next.push_back({std::string(), t->id, false});
        pos = hit = hit + t->content.size();
      }
      if (pos < f.text.size()) next.push_back({f.text.substr(pos), -1, false, f.offset + pos});
    }
    fragments = std::move(next);
  }
  return fragments;
}

std::vector<Segment> BpeTokenizer::split_added(const std::string& text, const SpecialScope& scope) const {
  if (spec_.match == AddedTokenMatch::longest_first) {
    std::vector<Segment> segments = split_longest_first(text, scope);
    for (Segment& s : segments)
      if (s.token < 0) s.text = normalize(s.text);
    return segments;
  }
  std::vector<Segment> out;
  for (Segment& first : split_leftmost_longest({text, -1, true, 0}, false, scope)) {
    if (first.token >= 0) {
      out.push_back(std::move(first));
      continue;
    }
    std::vector<char> normalized_mask;
    const SpecialScope normalized_scope = normalize_segment(&first, scope, &normalized_mask);
    for (Segment& second : split_leftmost_longest(first, true, normalized_scope)) out.push_back(std::move(second));
  }
  return out;
}

// Normalizes a first-pass segment, and carries `scope` over to the normalized text: each run of
// bytes with one flag is normalized on its own (the prepended text with the first), which gives
// the normalized text's mask wherever that equals normalizing the whole (the normalizers' patterns
// do not reach across runs). Otherwise special tokens count only if the whole segment allows them.
SpecialScope BpeTokenizer::normalize_segment(Segment* segment, const SpecialScope& scope,
                                             std::vector<char>* mask) const {
  const std::string raw = segment->text;
  segment->text = normalize(raw);
  SpecialScope out{nullptr, scope.allows(segment->offset, segment->offset + raw.size()), scope.markers};
  if (scope.mask == nullptr || out.all) return out;
  std::string pieces;
  for (size_t begin = 0; begin < raw.size();) {
    const char flag = (*scope.mask)[segment->offset + begin];
    size_t end = begin;
    while (end < raw.size() && (*scope.mask)[segment->offset + end] == flag) ++end;
    std::string piece = raw.substr(begin, end - begin);
    for (const NormalizeStep& step : spec_.normalizer) {
      if (step.kind == NormalizeStep::Kind::prepend) {
        if (begin == 0) piece = step.text + piece;
      } else {
        piece = replace_all(piece, step.text, step.replacement);
      }
    }
    pieces += piece;
    mask->insert(mask->end(), piece.size(), flag);
    begin = end;
  }
  if (pieces == segment->text) out.mask = mask;
  return out;
}

void BpeTokenizer::pre_tokenize(Piece piece, size_t step_index, const PieceSink& emit) const {
  if (step_index == spec_.pre_tokenizer.size()) {
    emit(piece);
    return;
  }
  const PreTokenizeStep& step = spec_.pre_tokenizer[step_index];
  const PieceSink next = [&](const Piece& p) { pre_tokenize(p, step_index + 1, emit); };
  auto find_literal = [](const std::string& literal) {
    return [&literal](const std::string& text, const std::function<void(size_t, size_t)>& on_match) {
      for_each_literal(text, literal, on_match);
    };
  };
  auto find_regex = [&step](const std::string& text, const std::function<void(size_t, size_t)>& on_match) {
    step.regex->for_each_match(text, on_match);
  };
  switch (step.kind) {
    case PreTokenizeStep::Kind::split:
      if (step.regex) split_piece(piece, step.behavior, find_regex, next);
      else split_piece(piece, step.behavior, find_literal(step.literal), next);
      break;
    case PreTokenizeStep::Kind::metaspace: {
      piece.text = replace_all(piece.text, " ", step.replacement);
      const bool prepend = step.prepend == PreTokenizeStep::Prepend::always ||
                           (step.prepend == PreTokenizeStep::Prepend::first && piece.at_start);
      if (prepend && !starts_with(piece.text, step.replacement)) piece.text = step.replacement + piece.text;
      if (step.split) split_piece(piece, SplitBehavior::merged_with_next, find_literal(step.replacement), next);
      else next(piece);
      break;
    }
    case PreTokenizeStep::Kind::byte_level:
      if (step.add_prefix_space && !starts_with(piece.text, " ")) piece.text = " " + piece.text;
      if (step.regex) split_piece(piece, SplitBehavior::isolated, find_regex, next);
      else next(piece);
      break;
  }
}

void BpeTokenizer::encode_piece(const std::string& raw, std::vector<int32_t>& ids) const {
  std::string mapped;
  if (spec_.byte_level) {
    mapped.reserve(raw.size() * 2);
    for (unsigned char b : raw) mapped += byte_level_table().text[b];
  }
  const std::string& word = spec_.byte_level ? mapped : raw;
  if (word.empty()) return;
  if (spec_.ignore_merges) {
    const int32_t whole = lookup(word);
    if (whole >= 0) {
      ids.push_back(whole);
      return;
    }
  }
  // Symbols: token ids, or -(k + 1) for the k-th character the vocabulary lacks (kept as text).
  std::vector<int32_t> symbols;
  std::vector<std::string> unknown;
  symbols.reserve(word.size());
  bool previous_unk = false;
  for (size_t pos = 0; pos < word.size();) {
    // A byte that begins no valid character is a character of its own (the tokenizers library
    // never sees one; llama.cpp would swallow the bytes after it).
    const size_t valid = utf8::valid_char_length(word.data() + pos, word.size() - pos);
    const size_t length = valid > 0 ? valid : 1;
    const std::string c = word.substr(pos, length);
    pos += length;
    const int32_t id = lookup(c);
    if (id >= 0) {
      symbols.push_back(id);
      previous_unk = false;
      continue;
    }
    if (spec_.byte_fallback) {
      bool all = true;
      for (unsigned char b : c) all = all && byte_piece_[b] >= 0;
      if (all) {
        for (unsigned char b : c) symbols.push_back(byte_piece_[b]);
        previous_unk = false;
        continue;
      }
    }
    if (spec_.unknown != UnknownChars::unk_or_drop) {
      unknown.push_back(c);
      symbols.push_back(-static_cast<int32_t>(unknown.size()));
    } else if (spec_.unk_id >= 0 && !(spec_.fuse_unk && previous_unk)) {
      symbols.push_back(spec_.unk_id);
      previous_unk = true;
    }
  }
  auto text_of = [&](int32_t symbol) -> const std::string& {
    return symbol >= 0 ? spec_.tokens[static_cast<size_t>(symbol)] : unknown[static_cast<size_t>(-symbol - 1)];
  };
  if (spec_.rule == MergeRule::ranked) {
    bpe_merge(symbols, [&](int32_t left, int32_t right, int32_t* merged, double* priority) {
      if (left < 0 || right < 0) return false;
      auto it = merges_.find((uint64_t(uint32_t(left)) << 32) | uint32_t(right));
      if (it == merges_.end()) return false;
      *merged = it->second.second;
      *priority = -static_cast<double>(it->second.first);
      return true;
    });
  } else {
    std::string pair;
    bpe_merge(symbols, [&](int32_t left, int32_t right, int32_t* merged, double* priority) {
      pair = text_of(left);
      pair += text_of(right);
      const int32_t id = lookup(pair);
      if (id < 0) return false;
      *merged = id;
      *priority = spec_.scores[static_cast<size_t>(id)];
      return true;
    });
  }
  for (int32_t symbol : symbols) {
    if (symbol >= 0) {
      ids.push_back(symbol);
      continue;
    }
    for (unsigned char b : text_of(symbol)) {
      if (spec_.unknown == UnknownChars::spm_bytes) {
        int32_t id = byte_piece_[b];
        if (id < 0) id = lookup(std::string(1, static_cast<char>(b)));
        if (id < 0) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
          fail(spec_.source, ": byte 0x", hex + 3, " of the text has no token (neither ", hex, " nor the byte itself)");
        }
        ids.push_back(id);
      } else {
        const int32_t id = lookup(std::string(1, static_cast<char>(b)));
        if (id >= 0) ids.push_back(id);
      }
    }
  }
}

void BpeTokenizer::encode_segments(const std::string& text, const SpecialScope& scope, size_t max_ids,
                                   std::vector<int32_t>& ids) const {
  auto check_count = [&] {
    if (ids.size() > max_ids) throw TooManyTokens(max_ids, text.size(), 0);
  };
  for (Segment& segment : split_added(text, scope)) {
    if (segment.token >= 0) {
      ids.push_back(segment.token);
      check_count();
      continue;
    }
    if (segment.text.empty()) continue;  // an empty text has no pieces (Metaspace adds no "▁" to it)
    pre_tokenize({std::move(segment.text), segment.at_start}, 0, [&](const Piece& piece) {
      encode_piece(piece.text, ids);
      check_count();
    });
  }
}

std::vector<int32_t> BpeTokenizer::encode(const std::string& text, bool add_special, size_t max_ids) const {
  return encode_scoped(text, add_special, SpecialScope{}, max_ids);
}

std::vector<int32_t> BpeTokenizer::encode_plain(const std::string& text, bool add_special, size_t max_ids) const {
  return encode_scoped(text, add_special, SpecialScope{nullptr, false, nullptr}, max_ids);
}

std::vector<int32_t> BpeTokenizer::encode_scoped(const std::string& text, bool add_special, const SpecialScope& scope,
                                                 size_t max_ids) const {
  check_text_bytes(text.size(), max_ids, max_bytes_per_token_);
  std::vector<int32_t> ids;
  if (add_special) ids = spec_.prefix;
  encode_segments(text, scope, max_ids, ids);
  if (add_special) ids.insert(ids.end(), spec_.suffix.begin(), spec_.suffix.end());
  if (ids.size() > max_ids) throw TooManyTokens(max_ids, text.size(), 0);
  return ids;
}

std::vector<int32_t> BpeTokenizer::encode_spans(const std::vector<TextSpan>& spans, const std::vector<int32_t>& markers,
                                               size_t max_ids) const {
  size_t bytes = 0;
  for (const TextSpan& span : spans) bytes += span.text.size();
  check_text_bytes(bytes, max_ids, max_bytes_per_token_);
  std::string text;
  std::vector<char> mask;
  text.reserve(bytes);
  mask.reserve(bytes);
  for (const TextSpan& span : spans) {
    text += span.text;
    mask.insert(mask.end(), span.text.size(), span.special ? 1 : 0);
  }
  std::vector<int32_t> sorted = markers;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int32_t> ids;
  encode_segments(text, SpecialScope{&mask, false, &sorted}, max_ids, ids);
  return ids;
}

// The global argument: the normalizer and pre-tokenizer only lengthen the text between added
// tokens (a replacement no shorter than its pattern, a prepended or prefix space, Metaspace's
// replacement for a space, GPT-2's one or two bytes per byte), split it without removing any, and
// every byte of the result ends in a token that stands for at most the longest token text's bytes
// (or one unknown character's 4); added tokens stand for their content.
size_t BpeTokenizer::bytes_per_token_bound() const {
  for (const AddedToken& t : spec_.added)
    if (t.lstrip || t.rstrip) return 0;
  for (const NormalizeStep& step : spec_.normalizer)
    if (step.kind == NormalizeStep::Kind::replace && step.replacement.size() < step.text.size()) return 0;
  for (const PreTokenizeStep& step : spec_.pre_tokenizer) {
    if (step.kind == PreTokenizeStep::Kind::split && step.behavior == SplitBehavior::removed) return 0;
    if (step.kind == PreTokenizeStep::Kind::metaspace && step.replacement.empty()) return 0;
  }
  size_t longest = 0;
  for (const std::string& t : spec_.tokens) longest = std::max(longest, t.size());
  for (const std::string& t : added_normalized_content_) longest = std::max(longest, t.size());
  for (const AddedToken& t : spec_.added) longest = std::max(longest, t.content.size());
  longest = std::max<size_t>(longest, 1);
  auto all_bytes = [](auto has) {
    for (int b = 0; b < 256; ++b)
      if (!has(b)) return false;
    return true;
  };
  const bool every_char_known =
      (spec_.byte_level && all_bytes([&](int b) { return lookup(byte_level_table().text[b]) >= 0; })) ||
      (spec_.byte_fallback && all_bytes([&](int b) { return byte_piece_[b] >= 0; }));
  if (every_char_known) return longest;
  switch (spec_.unknown) {
    case UnknownChars::unk_or_drop:  // one unknown character is one token, unless it is dropped or fused
      return spec_.unk_id >= 0 && !spec_.fuse_unk ? std::max<size_t>(longest, 4) : 0;
    case UnknownChars::spm_bytes:  // each byte a token, or the encoding fails
      return longest;
    case UnknownChars::raw_bytes:  // each byte a token where one exists, else dropped
      return all_bytes([&](int b) { return lookup(std::string(1, static_cast<char>(b))) >= 0; }) ? longest : 0;
  }
  return 0;
}

std::string BpeTokenizer::run_decoder(std::vector<std::string> tokens, bool first, bool lossy) const {
  bool fused = false;
  for (const DecodeStep& step : spec_.decoder) {
    switch (step.kind) {
      case DecodeStep::Kind::replace:
        for (std::string& t : tokens) t = replace_all(t, step.from, step.to);
        break;
      case DecodeStep::Kind::byte_fallback: {
        std::vector<std::string> out;
        std::string bytes;
        size_t count = 0;
        auto flush = [&] {
          if (count == 0) return;
          if (!lossy || utf8::is_valid(bytes)) {
            out.push_back(bytes);
          } else {
            for (size_t i = 0; i < count; ++i) out.push_back("\xEF\xBF\xBD");
          }
          bytes.clear();
          count = 0;
        };
        for (std::string& t : tokens) {
          const int value = byte_piece_value(t);
          if (value >= 0) {
            bytes.push_back(static_cast<char>(value));
            ++count;
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case DecodeStep::Kind::fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, all);
        fused = true;
        break;
      }
      case DecodeStep::Kind::strip:
        // Before Fuse every token is stripped; after it, only the text's beginning is.
        for (size_t i = 0; i < tokens.size(); ++i) {
          if (fused && !first) break;
          for (size_t k = 0; k < step.strip_start && starts_with(tokens[i], step.from); ++k)
            tokens[i].erase(0, step.from.size());
        }
        break;
      case DecodeStep::Kind::metaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          // The library drops every replacement character of the list's first token.
          const bool at_start = i == 0 && (first || fused);
          tokens[i] = replace_all(tokens[i], step.replacement, at_start && step.metaspace_prepends ? "" : " ");
        }
        break;
      case DecodeStep::Kind::byte_level: {
        std::string bytes;
        const auto& table = byte_level_table();
        for (const std::string& t : tokens) {
          std::string own;
          bool all_mapped = true;
          for (size_t pos = 0; pos < t.size() && all_mapped;) {
            size_t length = 0;
            const uint32_t cp = utf8::decode_at(t, pos, &length);
            auto it = table.byte_of.find(cp);
            if (it == table.byte_of.end() || length == 0) all_mapped = false;
            else own.push_back(static_cast<char>(it->second));
            pos += length;
          }
          bytes += all_mapped ? own : t;
        }
        tokens.assign(1, lossy ? utf8::lossy(bytes) : bytes);
        fused = true;
        break;
      }
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    check_id(id);
    tokens.push_back(spec_.tokens[static_cast<size_t>(id)]);
  }
  if (!spec_.has_decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  if (spec_.decode_verbatim.empty()) return run_decoder(std::move(tokens), true, true);
  // Verbatim tokens (GGUF control and user-defined) cut the text into runs decoded one by one.
  std::string out;
  std::vector<std::string> run;
  bool first = true;
  auto flush = [&] {
    if (run.empty()) return;
    out += run_decoder(std::move(run), first, true);
    run.clear();
    first = false;
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    if (spec_.decode_verbatim[static_cast<size_t>(ids[i])]) {
      flush();
      out += tokens[i];
      first = false;
    } else {
      run.push_back(std::move(tokens[i]));
    }
  }
  flush();
  return out;
}

bool BpeTokenizer::byte_fallback(int32_t id) const {
  check_id(id);
  if (!spec_.has_decoder || (!spec_.decode_verbatim.empty() && spec_.decode_verbatim[static_cast<size_t>(id)]))
    return false;
  const bool has_step = std::any_of(spec_.decoder.begin(), spec_.decoder.end(),
                                    [](const DecodeStep& step) { return step.kind == DecodeStep::Kind::byte_fallback; });
  return has_step && byte_piece_value(spec_.tokens[static_cast<size_t>(id)]) >= 0;
}

std::string BpeTokenizer::token_bytes(int32_t prev, int32_t id) const {
  check_id(id);
  if (prev != -1) check_id(prev);
  const std::string& text = spec_.tokens[static_cast<size_t>(id)];
  if (!spec_.decode_verbatim.empty() && spec_.decode_verbatim[static_cast<size_t>(id)]) return text;
  if (!spec_.has_decoder) return prev == -1 ? text : " " + text;
  return run_decoder({text}, prev == -1, false);
}

}  // namespace


std::unique_ptr<TextTokenizer> make_bpe_tokenizer(BpeSpec spec) {
  return std::make_unique<BpeTokenizer>(std::move(spec));
}

}  // namespace minfer
