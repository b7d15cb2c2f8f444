#include "kernels/cpu/softmax.h"

#include <Eigen/Core>

#include "kernels/cpu/parallel.h"

namespace minfer::cpu {

void softmax(ThreadPool& pool, float* x, int64_t ld_x, int64_t M, int64_t N) {
  for_rows(pool, M, 8 * N, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      Eigen::Map<Eigen::ArrayXf> row(x + m * ld_x, N);
      row = (row - row.maxCoeff()).exp();
      row /= row.sum();
    }
  });
}

}  // namespace minfer::cpu
