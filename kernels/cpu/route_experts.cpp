#include "kernels/cpu/route_experts.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/parallel.h"
#include "kernels/ref/route_experts.h"

namespace minfer::cpu {

void route_experts(ThreadPool& pool, int32_t* ids, float* weights, const float* logits, int64_t ld_logits, int64_t M,
                   int64_t E, int64_t k, bool normalize) {
  for_rows(pool, M, 8 * E, [&](int64_t m0, int64_t m1) {
    // note: on the stack, not a buffer a worker grows: which worker takes which rows changes from
    // call to call, and a worker's first time would allocate in the decode loop.
    int32_t order[ref::kMaxExperts];
    for (int64_t m = m0; m < m1; ++m) {
      const float* l = logits + m * ld_logits;
      std::iota(order, order + E, 0);
      std::partial_sort(order, order + k, order + E,
                        [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
      const float top = l[order[0]];
      float all = 0.0f, chosen = 0.0f;
      for (int64_t e = 0; e < E; ++e) all += std::exp(l[e] - top);
      for (int64_t j = 0; j < k; ++j) chosen += std::exp(l[order[j]] - top);
      const float total = normalize ? chosen : all;
      for (int64_t j = 0; j < k; ++j) {
        ids[m * k + j] = order[j];
        weights[m * k + j] = std::exp(l[order[j]] - top) / total;
      }
    }
  });
}

}  // namespace minfer::cpu
