#include "kernels/ref/matmul.h"

#include <vector>

#include "kernels/ref/element.h"

namespace minfer::ref {

void matmul(float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w,
            DType w_dtype, int64_t M, int64_t N, int64_t K) {
  std::vector<double> row(static_cast<size_t>(K));  // row n of w, read once for all M rows of x
  std::vector<float> blocks(is_quantized(w_dtype) ? static_cast<size_t>(K) : 0);
  for (int64_t n = 0; n < N; ++n) {
    if (is_quantized(w_dtype)) {  // a quantized row at once: load_element would dequantize a block per element
      dequantize_row(w_dtype, blocks.data(), static_cast<const char*>(w) + n * (K / dtype_block(w_dtype)) * dtype_block_bytes(w_dtype),
                     static_cast<size_t>(K));
      for (int64_t k = 0; k < K; ++k) row[size_t(k)] = blocks[size_t(k)];
    } else {
      for (int64_t k = 0; k < K; ++k) row[size_t(k)] = load_element(w, w_dtype, n * K + k);
    }
    for (int64_t m = 0; m < M; ++m) {
      double sum = 0.0;
      for (int64_t k = 0; k < K; ++k) sum += double(x[m * ld_x + k]) * row[size_t(k)];
      out[m * ld_out + n] = static_cast<float>(sum);
    }
  }
}

}  // namespace minfer::ref
