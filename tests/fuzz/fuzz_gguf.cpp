// libFuzzer target for the GGUF reader: any bytes are either refused with an Error or parsed into
// metadata and tensor infos whose tensors lie inside the input (touched at both ends), and then
// into a model config as the model loader reads it, and separately into a vocabulary and a
// tokenizer that encodes and decodes a fixed text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gguf_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    minfer::GgufFile file(data, size, "fuzz");
    const minfer::GgufContents& g = file.contents();
    unsigned sum = 0;
    for (const auto& [name, t] : g.tensors)
      if (t.bytes > 0) sum += data[g.data_offset + t.offset] + data[g.data_offset + t.offset + t.bytes - 1];
    volatile unsigned sink = sum;
    (void)sink;
    try {
      minfer::read_gguf_config(file);
    } catch (const minfer::Error&) {
    }
    if (file.find("tokenizer.ggml.tokens") != nullptr) {
      auto tokenizer = minfer::make_gguf_tokenizer(minfer::read_gguf_vocab(file), "fuzz");
      const std::vector<int32_t> ids = tokenizer->encode("Hello, world! 123 \xc3\xa9\xe2\x80\x94 <s>", true);
      std::string text = tokenizer->decode(ids);
      for (size_t i = 0; i < ids.size(); ++i) text += tokenizer->token_bytes(i ? ids[i - 1] : -1, ids[i]);
      volatile size_t sink2 = text.size();
      (void)sink2;
    }
  } catch (const minfer::Error&) {
  }
  return 0;
}
