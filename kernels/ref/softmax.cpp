#include "kernels/ref/softmax.h"

#include <cmath>
#include <vector>

namespace minfer::ref {

void softmax(float* x, int64_t ld_x, int64_t M, int64_t N) {
  std::vector<double> e(static_cast<size_t>(N));
  for (int64_t m = 0; m < M; ++m) {
    float* row = x + m * ld_x;
    double max_value = row[0];
    for (int64_t i = 1; i < N; ++i) max_value = row[i] > max_value ? row[i] : max_value;
    double total = 0.0;
    for (int64_t i = 0; i < N; ++i) total += (e[i] = std::exp(double(row[i]) - max_value));
    for (int64_t i = 0; i < N; ++i) row[i] = static_cast<float>(e[i] / total);
  }
}

}  // namespace minfer::ref
