#include "kernels/ref/glu.h"

#include <cmath>

namespace minfer::ref {

namespace {
double activate(double g, GluActivation activation) {
  if (activation == GluActivation::silu) return g / (1.0 + std::exp(-g));
  if (activation == GluActivation::sigmoid) return 1.0 / (1.0 + std::exp(-g));
  const double sqrt_2_over_pi = 0.79788456080286535588;
  return 0.5 * g * (1.0 + std::tanh(sqrt_2_over_pi * (g + 0.044715 * g * g * g)));
}
}  // namespace

void glu(float* out, int64_t ld_out, const float* gate, int64_t ld_gate, int64_t gate_step, const float* up,
         int64_t ld_up, int64_t M, int64_t F, GluActivation activation) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t f = 0; f < F; ++f)
      out[m * ld_out + f] =
          static_cast<float>(activate(gate[m * ld_gate + f * gate_step], activation) * double(up[m * ld_up + f]));
}

}  // namespace minfer::ref
