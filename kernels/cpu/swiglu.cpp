#include "kernels/cpu/swiglu.h"

#include <Eigen/Core>

#include "kernels/cpu/parallel.h"

namespace minfer::cpu {

void swiglu(ThreadPool& pool, float* out, int64_t ld_out, const float* gate, int64_t ld_gate,
            const float* up, int64_t ld_up, int64_t M, int64_t F) {
  for_rows(pool, M, 8 * F, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      Eigen::Map<const Eigen::ArrayXf> g(gate + m * ld_gate, F), u(up + m * ld_up, F);
      Eigen::Map<Eigen::ArrayXf>(out + m * ld_out, F) = g / (1.0f + (-g).exp()) * u;
    }
  });
}

}  // namespace minfer::cpu
