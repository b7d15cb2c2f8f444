#include "kernels/ref/fill.h"

#include "core/quants.h"

#include "kernels/ref/element.h"

namespace minfer::ref {

void fill_uniform(void* data, DType dtype, int64_t n, uint64_t seed, float lo, float hi) {
  if (is_quantized(dtype)) {  // each block's values, quantized together
    const int64_t size = dtype_block(dtype);
    MINFER_CHECK(n % size == 0, "fill_uniform: ", n, " elements are not whole ", dtype_name(dtype), " blocks");
    float block[kQK];
    for (int64_t b = 0; b < n / size; ++b) {
      for (int64_t j = 0; j < size; ++j) block[j] = uniform_at(seed, uint64_t(b * size + j), lo, hi);
      quantize_row(dtype, static_cast<char*>(data) + b * dtype_block_bytes(dtype), block, size_t(size));
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) store_element(data, dtype, i, uniform_at(seed, uint64_t(i), lo, hi));
}

}  // namespace minfer::ref
