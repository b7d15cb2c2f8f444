#include "kernels/ref/argmax.h"

namespace minfer::ref {

void argmax(int32_t* out, const float* x, int64_t ld_x, int64_t M, int64_t N) {
  for (int64_t m = 0; m < M; ++m) {
    const float* row = x + m * ld_x;
    int64_t best = 0;
    for (int64_t i = 1; i < N; ++i)
      if (row[i] > row[best]) best = i;
    out[m] = static_cast<int32_t>(best);
  }
}

}  // namespace minfer::ref
