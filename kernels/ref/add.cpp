#include "kernels/ref/add.h"

namespace minfer::ref {

void add(float* out, int64_t ld_out, const float* a, int64_t ld_a, const float* b, int64_t ld_b,
         int64_t M, int64_t D) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t d = 0; d < D; ++d) out[m * ld_out + d] = a[m * ld_a + d] + b[m * ld_b + d];
}

}  // namespace minfer::ref
