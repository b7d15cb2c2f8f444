#include "kernels/ref/sum.h"

namespace minfer::ref {

void sum(float* out, const float* x, int64_t n) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += x[i];
  out[0] = static_cast<float>(total);
}

}  // namespace minfer::ref
