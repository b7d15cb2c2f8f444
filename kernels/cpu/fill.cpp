#include "kernels/cpu/fill.h"

#include "core/error.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ref/fill.h"

namespace minfer::cpu {

void fill_uniform(ThreadPool& pool, void* data, DType dtype, int64_t n, uint64_t seed, float lo,
                  float hi) {
  if (is_k_quant(dtype)) {
    MINFER_CHECK(n % dtype_block(dtype) == 0, "fill_uniform: ", n, " elements are not whole ", dtype_name(dtype), " blocks");
    for_rows(pool, n / dtype_block(dtype), 256, [&](int64_t b0, int64_t b1) {
      ref::fill_k_quant_blocks(data, dtype, b0, b1 - b0, seed, lo, hi);
    });
    return;
  }
  const int64_t block = 1 << 16;
  for_rows(pool, (n + block - 1) / block, block, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t begin = b * block, end = std::min(n, begin + block);
      float values[256];
      for (int64_t i = begin; i < end; i += 256) {
        int64_t count = std::min<int64_t>(256, end - i);
        for (int64_t j = 0; j < count; ++j) values[j] = ref::uniform_at(seed, uint64_t(i + j), lo, hi);
        convert_from_f32(static_cast<char*>(data) + dtype_bytes(dtype, uint64_t(i)), dtype, values, size_t(count));
      }
    }
  });
}

}  // namespace minfer::cpu
