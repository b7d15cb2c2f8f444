#include "kernels/cpu/argmax.h"

#include "kernels/cpu/parallel.h"
#include "kernels/ref/argmax.h"

namespace minfer::cpu {

void argmax(ThreadPool& pool, int32_t* out, const float* x, int64_t ld_x, int64_t M, int64_t N) {
  // The reference's plain loop, rows split across the threads: its strict ">" keeps the first of
  // equal maxima exactly as run.c does, which a vectorised max-reduction would not promise.
  for_rows(pool, M, N, [&](int64_t m0, int64_t m1) { ref::argmax(out + m0, x + m0 * ld_x, ld_x, m1 - m0, N); });
}

}  // namespace minfer::cpu
