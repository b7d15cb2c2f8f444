#include "kernels/ref/swiglu.h"

#include <cmath>

namespace minfer::ref {

void swiglu(float* out, int64_t ld_out, const float* gate, int64_t ld_gate, const float* up,
            int64_t ld_up, int64_t M, int64_t F) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t f = 0; f < F; ++f) {
      double g = gate[m * ld_gate + f];
      out[m * ld_out + f] = static_cast<float>(g / (1.0 + std::exp(-g)) * double(up[m * ld_up + f]));
    }
}

}  // namespace minfer::ref
