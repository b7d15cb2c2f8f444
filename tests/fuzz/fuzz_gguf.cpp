// libFuzzer target for the GGUF reader: any bytes are either refused with an Error or parsed into
// metadata and tensor infos whose tensors lie inside the input (touched at both ends), and then
// into a model config and a vocabulary as the model loader reads them.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "models/gguf.h"
#include "models/gguf_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    minfer::GgufFile file(data, size, "fuzz");
    const minfer::GgufContents& g = file.contents();
    unsigned sum = 0;
    for (const auto& [name, t] : g.tensors)
      if (t.bytes > 0) sum += data[g.data_offset + t.offset] + data[g.data_offset + t.offset + t.bytes - 1];
    volatile unsigned sink = sum;
    (void)sink;
    minfer::read_gguf_config(file);
  } catch (const minfer::Error&) {
  }
  return 0;
}
