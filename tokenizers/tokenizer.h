// llama2.c's tokenizer: the tokenizer.bin format, run.c's BPE encode and its decode.
//
// File: uint32 max_token_length, then for every token: float32 score, int32 length, the bytes.
// The file does not store the number of tokens: minfer reads tokens until the file ends (run.c
// reads the model's vocab_size of them instead). A tokenizer may hold fewer tokens than the model
// has rows, never more: generate, chat, serve and perplexity refuse one with more
// (check_tokenizer_fits in cli/cli_common.h), and naive refuses an id outside the model's
// vocabulary when it reaches the model.
//
// Encode (run.c's encode(text, bos, eos)): optional BOS (1); a dummy-prefix space token when the
// text is not empty; every UTF-8 character becomes its token if the vocabulary has it, else one
// byte-fallback token <0xXX> (id byte + 3) per byte; then, repeatedly, the adjacent pair whose
// concatenation is in the vocabulary with the highest score is merged, until no pair merges;
// optional EOS (2). Decode maps an id to its text piece, dropping the leading space of the first
// piece after BOS and turning <0xXX> pieces into the raw byte.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace minfer {

class Tokenizer {
 public:
  // Reads a tokenizer.bin; one clear line naming the file for a malformed one.
  static Tokenizer load(const std::string& path);
  static Tokenizer parse(const uint8_t* data, size_t size, const std::string& source);
  Tokenizer(std::vector<std::string> pieces, std::vector<float> scores, uint32_t max_token_length);

  int64_t vocab_size() const { return static_cast<int64_t>(pieces_.size()); }
  uint32_t max_token_length() const { return max_token_length_; }
  const std::string& piece(int32_t id) const { return pieces_.at(static_cast<size_t>(id)); }
  float score(int32_t id) const { return scores_.at(static_cast<size_t>(id)); }

  // The text up to its first NUL byte, as run.c sees a C string.
  std::vector<int32_t> encode(const std::string& text, bool bos, bool eos) const;
  // The text of `token` following `prev` (run.c's decode).
  std::string decode(int32_t prev, int32_t token) const;
  // run.c's safe_printf: false for a piece that is a single unprintable byte.
  static bool printable(const std::string& piece);

 private:
  int32_t lookup(const std::string& text) const;  // -1 if absent

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  uint32_t max_token_length_;
  std::vector<int32_t> by_text_;  // ids sorted by their piece, for binary search
};

}  // namespace minfer
