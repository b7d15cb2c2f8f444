// libFuzzer target for the tokenizer. The first byte chooses what the rest is:
//   odd:  a tokenizer.bin file, parsed, then used to encode and decode a fixed text;
//   even: text, encoded and decoded with a small built-in vocabulary (bytes plus merges).
// Malformed files and unencodable text may throw minfer::Error; nothing may crash or hang.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizers/tokenizer.h"

namespace {

minfer::Tokenizer small_tokenizer() {
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    pieces.push_back(name);
  }
  for (const char* p : {" ", "e", "h", "l", "o", "w", "r", "d", "he", "ll", "hell", "hello", " w", "or",
                        "wor", "world", " hello", "é", "日本", "日", "本", "  ", "\n"})
    pieces.push_back(p);
  std::vector<float> scores(pieces.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -static_cast<float>(i % 17);
  return minfer::Tokenizer(pieces, scores, 16);
}

void round_trip(const minfer::Tokenizer& t, const std::string& text) {
  std::vector<int32_t> ids = t.encode(text, true, true);
  std::string out;
  for (size_t i = 1; i < ids.size(); ++i) {
    std::string piece = t.decode(ids[i - 1], ids[i]);
    if (minfer::Tokenizer::printable(piece)) out += piece;
  }
  volatile size_t sink = out.size();
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool file = data[0] & 1;
  ++data;
  --size;
  try {
    if (file) {
      minfer::Tokenizer t = minfer::Tokenizer::parse(data, size, "fuzz");
      round_trip(t, "hello world,日本語 <0x41>");
    } else {
      static const minfer::Tokenizer t = small_tokenizer();
      round_trip(t, std::string(reinterpret_cast<const char*>(data), size));
    }
  } catch (const minfer::Error&) {
  }
  return 0;
}
