#include "kernels/ref/matmul.h"

#include "kernels/ref/element.h"

namespace minfer::ref {

void matmul(float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w,
            DType w_dtype, int64_t M, int64_t N, int64_t K) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double sum = 0.0;
      for (int64_t k = 0; k < K; ++k)
        sum += double(x[m * ld_x + k]) * load_element(w, w_dtype, n * K + k);
      out[m * ld_out + n] = static_cast<float>(sum);
    }
}

}  // namespace minfer::ref
