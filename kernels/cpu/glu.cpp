#include "kernels/cpu/glu.h"

#include <Eigen/Core>
#include <cmath>

#include "kernels/cpu/parallel.h"

namespace minfer::cpu {

void glu(ThreadPool& pool, float* out, int64_t ld_out, const float* gate, int64_t ld_gate, int64_t gate_step,
         const float* up, int64_t ld_up, int64_t M, int64_t F, GluActivation activation) {
  for_rows(pool, M, 8 * F, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      Eigen::Map<const Eigen::ArrayXf> u(up + m * ld_up, F);
      Eigen::Map<Eigen::ArrayXf> o(out + m * ld_out, F);
      if (gate_step == 0) {  // one gate a row
        const float g = gate[m * ld_gate];
        o = u * (activation == GluActivation::sigmoid ? 1.0f / (1.0f + std::exp(-g))
                 : activation == GluActivation::silu  ? g / (1.0f + std::exp(-g))
                                                      : 0.5f * g * (1.0f + std::tanh(0.7978845608f * (g + 0.044715f * g * g * g))));
        continue;
      }
      Eigen::Map<const Eigen::ArrayXf> g(gate + m * ld_gate, F);
      if (activation == GluActivation::sigmoid) {
        o = u / (1.0f + (-g).exp());
      } else if (activation == GluActivation::silu) {
        o = g / (1.0f + (-g).exp()) * u;
      } else {
        const float sqrt_2_over_pi = 0.7978845608f;
        o = 0.5f * g * (1.0f + (sqrt_2_over_pi * (g + 0.044715f * g * g * g)).tanh()) * u;
      }
    }
  });
}

}  // namespace minfer::cpu
