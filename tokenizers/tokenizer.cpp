#include "tokenizers/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/files.h"
#include "tokenizers/bpe.h"

namespace minfer {

namespace {
constexpr uint32_t kMaxTokenLength = 1 << 16;
constexpr size_t kMaxTokenizerBytes = size_t(1) << 30;
}  // namespace

Tokenizer Tokenizer::load(const std::string& path) {
  InputFile file(path, "tokenizer");
  const std::string data = file.read_all(kMaxTokenizerBytes);
  return parse(reinterpret_cast<const uint8_t*>(data.data()), data.size(), path);
}

Tokenizer Tokenizer::parse(const uint8_t* data, size_t size, const std::string& source) {
  if (size < 4) fail(source, ": tokenizer file is ", size, " bytes, shorter than its 4-byte header");
  uint32_t max_length;
  std::memcpy(&max_length, data, 4);
  if (max_length == 0 || max_length > kMaxTokenLength)
    fail(source, ": max_token_length = ", max_length, ", must be in [1, ", kMaxTokenLength, "]");
  std::vector<std::string> pieces;
  std::vector<float> scores;
  size_t offset = 4;
  while (offset < size) {
    const size_t id = pieces.size();
    if (size - offset < 8) fail(source, ": token ", id, " is cut off inside its score and length");
    float score;
    int32_t length;
    std::memcpy(&score, data + offset, 4);
    std::memcpy(&length, data + offset + 4, 4);
    offset += 8;
    if (!std::isfinite(score)) fail(source, ": token ", id, " has a score that is not finite");
    if (length < 1 || static_cast<uint32_t>(length) > max_length)
      fail(source, ": token ", id, " has length ", length, ", must be in [1, ", max_length, "]");
    if (size - offset < static_cast<size_t>(length))
      fail(source, ": token ", id, " is cut off: ", length, " bytes announced, ", size - offset, " left");
    pieces.emplace_back(reinterpret_cast<const char*>(data + offset), static_cast<size_t>(length));
    scores.push_back(score);
    offset += static_cast<size_t>(length);
  }
  // run.c's contract: ids 0, 1, 2 are <unk>, BOS and EOS, and ids 3 .. 258 the byte-fallback
  // pieces <0x00> .. <0xFF>, which encode() and decode() rely on.
  if (pieces.size() < 259)
    fail(source, ": the tokenizer holds ", pieces.size(), " tokens; a llama2.c tokenizer has at least 259 ",
         "(<unk>, BOS, EOS and the 256 byte pieces <0x00> .. <0xFF>)");
  for (int b = 0; b < 256; ++b) {
    char expected[8];
    std::snprintf(expected, sizeof(expected), "<0x%02X>", b);
    if (pieces[3 + b] != expected)
      fail(source, ": token ", 3 + b, " is '", pieces[3 + b], "', where a llama2.c tokenizer has the byte piece ",
           expected);
  }
  return Tokenizer(std::move(pieces), std::move(scores), max_length);
}

Tokenizer::Tokenizer(std::vector<std::string> pieces, std::vector<float> scores,
                     uint32_t max_token_length)
    : pieces_(std::move(pieces)), scores_(std::move(scores)), max_token_length_(max_token_length) {
  MINFER_CHECK(pieces_.size() == scores_.size(), "tokenizer: ", pieces_.size(), " pieces, ", scores_.size(),
               " scores");
  MINFER_CHECK(pieces_.size() >= 3, "tokenizer: ", pieces_.size(), " tokens cannot hold <unk>, BOS and EOS");
  MINFER_CHECK(pieces_.size() <= (size_t(1) << 22), "tokenizer: ", pieces_.size(), " tokens is too many");
  by_text_.resize(pieces_.size());
  for (size_t i = 0; i < pieces_.size(); ++i) by_text_[i] = static_cast<int32_t>(i);
  // Stable: of equal pieces the lowest id is found first.
  std::stable_sort(by_text_.begin(), by_text_.end(),
                   [&](int32_t a, int32_t b) { return pieces_[a] < pieces_[b]; });
}

int32_t Tokenizer::lookup(const std::string& text) const {
  auto it = std::lower_bound(by_text_.begin(), by_text_.end(), text,
                             [&](int32_t id, const std::string& t) { return pieces_[id] < t; });
  return it != by_text_.end() && pieces_[*it] == text ? *it : -1;
}

std::vector<int32_t> Tokenizer::encode(const std::string& input, bool bos, bool eos) const {
  const std::string text = input.substr(0, std::strlen(input.c_str()));  // up to a NUL, like C
  std::vector<int32_t> tokens;
  tokens.reserve(text.size() + 3);
  auto push_bytes = [&](const std::string& bytes) {
    for (unsigned char byte : bytes) {
      int32_t id = static_cast<int32_t>(byte) + 3;  // <0x00> is token 3 in llama2.c's vocabulary
      if (id >= vocab_size())
        fail("tokenizer: byte 0x", std::hex, int(byte), std::dec, " has no token (byte fallback id ",
             id, " >= ", vocab_size(), " tokens)");
      tokens.push_back(id);
    }
  };
  if (bos) tokens.push_back(1);
  if (!text.empty()) {
    int32_t space = lookup(" ");
    if (space >= 0) tokens.push_back(space); else push_bytes(" ");
  }
  // Characters: a UTF-8 start byte and up to three continuation bytes.
  std::string character;
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80) character.clear();
    character.push_back(text[i]);
    bool continues = i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80;
    if (continues && character.size() < 4) continue;
    int32_t id = lookup(character);
    if (id >= 0) tokens.push_back(id); else push_bytes(character);
    character.clear();
  }
  // Merge the best-scoring adjacent pair (the leftmost of equals) until none merges; like run.c,
  // BOS takes part too, and a pair scoring -1e10 or less never merges.
  std::string pair;
  bpe_merge(tokens, [&](int32_t left, int32_t right, int32_t* merged, double* priority) {
    pair = pieces_[left];
    pair += pieces_[right];
    const int32_t id = lookup(pair);
    if (id < 0 || !(scores_[id] > -1e10f)) return false;
    *merged = id;
    *priority = scores_[id];
    return true;
  });
  if (eos) tokens.push_back(2);
  return tokens;
}

std::string Tokenizer::decode(int32_t prev, int32_t token) const {
  MINFER_CHECK(token >= 0 && token < vocab_size(), "decode: token id ", token, " outside [0, ",
               vocab_size(), ")");
  std::string piece = pieces_[static_cast<size_t>(token)];
  if (prev == 1 && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  // "<0xXX>" pieces stand for the raw byte XX.
  if (piece.size() >= 4 && piece.compare(0, 3, "<0x") == 0 && std::isxdigit(static_cast<unsigned char>(piece[3]))) {
    size_t digits = piece.size() >= 5 && std::isxdigit(static_cast<unsigned char>(piece[4])) ? 2 : 1;
    return std::string(1, static_cast<char>(std::stoi(piece.substr(3, digits), nullptr, 16)));
  }
  return piece;
}

bool Tokenizer::printable(const std::string& piece) {
  if (piece.empty()) return false;
  if (piece.size() == 1) {
    unsigned char byte = static_cast<unsigned char>(piece[0]);
    return std::isprint(byte) || std::isspace(byte);
  }
  return true;
}

}  // namespace minfer
