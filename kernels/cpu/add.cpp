#include "kernels/cpu/add.h"

#include <Eigen/Core>

#include "kernels/cpu/parallel.h"

namespace minfer::cpu {

void add(ThreadPool& pool, float* out, int64_t ld_out, const float* a, int64_t ld_a,
         const float* b, int64_t ld_b, int64_t M, int64_t D) {
  for_rows(pool, M, D, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m)
      Eigen::Map<Eigen::ArrayXf>(out + m * ld_out, D) =
          Eigen::Map<const Eigen::ArrayXf>(a + m * ld_a, D) +
          Eigen::Map<const Eigen::ArrayXf>(b + m * ld_b, D);
  });
}

}  // namespace minfer::cpu
