// libFuzzer target for the Hugging Face readers. The first byte chooses what the rest is:
//   even: a safetensors file, parsed, then every tensor it declares touched at both ends;
//   odd:  a config.json text, parsed into a model config.
// Malformed input may throw minfer::Error; nothing may crash, hang or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "formats/hf_model.h"
#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool config = data[0] & 1;
  ++data;
  --size;
  try {
    if (config) {
      minfer::parse_hf_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    } else {
      minfer::SafetensorsHeader h = minfer::parse_safetensors(data, size, "fuzz");
      unsigned sum = 0;
      for (const auto& [name, t] : h.tensors)
        if (t.end > t.begin) sum += data[h.data_offset + t.begin] + data[h.data_offset + t.end - 1];
      volatile unsigned sink = sum;
      (void)sink;
    }
  } catch (const minfer::Error&) {
  }
  return 0;
}
