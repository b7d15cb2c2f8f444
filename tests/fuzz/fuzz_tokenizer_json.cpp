// libFuzzer target for tokenizer.json: the input is the file's text. What loads is then used:
// texts with special tokens, white space, digits and invalid UTF-8 are encoded, decoded and
// streamed, and ids taken from the input are decoded. Malformed files may throw minfer::Error;
// nothing may crash, leak or hang.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizers/tokenizer_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto t = minfer::parse_tokenizer_json(text, "fuzz", "");
    const int64_t n = t->vocab_size();
    for (const char* sample : {"", " ", "Hello, world! 123 <s> </s>", "  a\tb\n\n c  ", "日本語 😀 ſ'S",
                               "<|endoftext|>x<|im_start|>", "\xFF\xE6\x97 cut"}) {
      const std::vector<int32_t> ids = t->encode(sample, true);
      std::string streamed;
      minfer::Utf8Stream stream;
      for (size_t i = 0; i < ids.size(); ++i) streamed += stream.push(t->token_bytes(i ? ids[i - 1] : -1, ids[i]));
      streamed += stream.flush();
      const std::string decoded = t->decode(ids);
      volatile size_t sink = decoded.size() + streamed.size();
      (void)sink;
    }
    std::vector<int32_t> ids;
    for (size_t i = 0; i < size && ids.size() < 32; i += 7) ids.push_back(static_cast<int32_t>(data[i] % n));
    volatile size_t sink = t->decode(ids).size();
    (void)sink;
  } catch (const minfer::Error&) {
  }
  return 0;
}
