#include "kernels/ref/fill.h"

#include "kernels/ref/element.h"

namespace minfer::ref {

void fill_uniform(void* data, DType dtype, int64_t n, uint64_t seed, float lo, float hi) {
  if (dtype == DType::q8_0) {  // each block's 32 values, quantized together
    MINFER_CHECK(n % 32 == 0, "fill_uniform: ", n, " elements are not whole q8_0 blocks");
    float block[32];
    for (int64_t b = 0; b < n / 32; ++b) {
      for (int j = 0; j < 32; ++j) block[j] = uniform_at(seed, uint64_t(b * 32 + j), lo, hi);
      quantize_q8_0(static_cast<BlockQ8*>(data) + b, block, 32);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) store_element(data, dtype, i, uniform_at(seed, uint64_t(i), lo, hi));
}

}  // namespace minfer::ref
