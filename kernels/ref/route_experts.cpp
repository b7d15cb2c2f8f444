#include "kernels/ref/route_experts.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace minfer::ref {

void route_experts(int32_t* ids, float* weights, const float* logits, int64_t ld_logits, int64_t M, int64_t E,
                   int64_t k, bool normalize) {
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t m = 0; m < M; ++m) {
    const float* l = logits + m * ld_logits;
    // The best k by logit (softmax keeps the order), the lower expert first among equals.
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    const double top = l[order[0]];
    double all = 0.0, chosen = 0.0;
    for (int64_t e = 0; e < E; ++e) all += std::exp(double(l[e]) - top);
    for (int64_t j = 0; j < k; ++j) chosen += std::exp(double(l[order[size_t(j)]]) - top);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = order[size_t(j)];
      ids[m * k + j] = e;
      weights[m * k + j] = static_cast<float>(std::exp(double(l[e]) - top) / (normalize ? chosen : all));
    }
  }
}

}  // namespace minfer::ref
