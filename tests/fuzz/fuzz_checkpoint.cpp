// libFuzzer target for the checkpoint parser: any bytes are either refused with an Error or give
// views whose every first and last element can be read (ASan checks they are inside the input).
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "formats/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    minfer::CheckpointLayout layout = minfer::parse_checkpoint(data, size, "fuzz");
    minfer::LlamaHostWeights w = minfer::view_checkpoint(data, layout, nullptr);
    float sum = 0.0f;
    auto touch = [&](const minfer::Tensor& t) {
      const float* p = t.data_as<float>();
      sum += p[0] + p[t.numel() - 1];
    };
    for (const minfer::Tensor* t : {&w.token_embedding, &w.rms_final, &w.classifier}) touch(*t);
    for (const auto& l : w.layers)
      for (const minfer::Tensor* t : {&l.rms_att, &l.wq, &l.wk, &l.wv, &l.wo, &l.rms_ffn, &l.w1, &l.w2, &l.w3})
        touch(*t);
    volatile float sink = sum;
    (void)sink;
  } catch (const minfer::Error&) {
  }
  return 0;
}
