#include "kernels/ref/rmsnorm.h"

#include <cmath>

namespace minfer::ref {

void rmsnorm(float* out, int64_t ld_out, const float* x, int64_t ld_x, const float* weight,
             int64_t M, int64_t D, float eps, int64_t groups) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t g = 0; g < groups; ++g) {
      const float* row = x + m * ld_x + g * D;
      double sum_squares = 0.0;
      for (int64_t d = 0; d < D; ++d) sum_squares += double(row[d]) * double(row[d]);
      double scale = 1.0 / std::sqrt(sum_squares / double(D) + double(eps));
      for (int64_t d = 0; d < D; ++d)
        out[m * ld_out + g * D + d] = static_cast<float>(double(weight[d]) * (scale * double(row[d])));
    }
}

}  // namespace minfer::ref
