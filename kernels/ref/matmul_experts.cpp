#include "kernels/ref/matmul_experts.h"

#include <vector>

#include "kernels/ref/matmul.h"

namespace minfer::ref {

void matmul_experts(float* out, int64_t ld_out, const float* x, int64_t ld_x, bool x_per_slot, const void* w,
                    DType w_dtype, const int32_t* ids, const float* weights, int64_t M, int64_t k, int64_t E,
                    int64_t N, int64_t K) {
  (void)E;  // ids are in [0, E): the backends check it
  const uint64_t expert_bytes = dtype_bytes(w_dtype, uint64_t(N) * uint64_t(K));
  std::vector<float> y(static_cast<size_t>(N));
  std::vector<double> sum(static_cast<size_t>(N));
  for (int64_t m = 0; m < M; ++m) {
    std::fill(sum.begin(), sum.end(), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t slot = m * k + j;
      const void* expert = static_cast<const char*>(w) + uint64_t(ids[slot]) * expert_bytes;
      float* dst = weights ? y.data() : out + slot * ld_out;
      matmul(dst, N, x + (x_per_slot ? slot : m) * ld_x, ld_x, expert, w_dtype, 1, N, K);
      if (weights)
        for (int64_t n = 0; n < N; ++n) sum[size_t(n)] += double(weights[slot]) * y[size_t(n)];
    }
    if (weights)
      for (int64_t n = 0; n < N; ++n) out[m * ld_out + n] = static_cast<float>(sum[size_t(n)]);
  }
}

}  // namespace minfer::ref
