#include "kernels/cpu/argmax.h"

#include "kernels/cpu/parallel.h"

namespace minfer::cpu {

void argmax(ThreadPool& pool, int32_t* out, const float* x, int64_t ld_x, int64_t M, int64_t N) {
  // A plain loop: the strict ">" keeps the first of equal maxima, exactly as run.c does, which a
  // vectorised max-reduction would not promise.
  for_rows(pool, M, N, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const float* row = x + m * ld_x;
      int64_t best = 0;
      for (int64_t i = 1; i < N; ++i)
        if (row[i] > row[best]) best = i;
      out[m] = static_cast<int32_t>(best);
    }
  });
}

}  // namespace minfer::cpu
