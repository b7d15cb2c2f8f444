#include "kernels/cpu/matmul_experts.h"

#include <cstring>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace minfer::cpu {

namespace {

// Grows when a call is larger than any before it, then reused.
template <class T>
T* scratch(std::vector<T>& v, int64_t n) {
  if (v.size() < size_t(n)) v.resize(size_t(n));
  return v.data();
}

}  // namespace

void matmul_experts(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x, bool x_per_slot,
                    const int32_t* ids, const float* weights, int64_t M, int64_t k, int64_t E, int64_t N, int64_t K,
                    ExpertProduct multiply) {
  thread_local std::vector<int64_t> first_of, row_of;
  thread_local std::vector<float> xs, ys;
  const int64_t slots = M * k;
  // A counting sort of the slots by expert: expert e's rows are [first[e], first[e + 1]) of xs and
  // ys, in slot order; row_of[s] is slot s's row there.
  int64_t* first = scratch(first_of, E + 1);
  int64_t* row = scratch(row_of, slots);
  std::fill(first, first + E + 1, 0);
  for (int64_t s = 0; s < slots; ++s) ++first[ids[s] + 1];
  for (int64_t e = 0; e < E; ++e) first[e + 1] += first[e];
  for (int64_t s = 0; s < slots; ++s) row[s] = first[ids[s]]++;
  for (int64_t e = E; e > 0; --e) first[e] = first[e - 1];  // each back to its expert's first row
  first[0] = 0;
  float* xg = scratch(xs, slots * K);
  float* yg = scratch(ys, slots * N);
  for_rows(pool, slots, K, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s)
      std::memcpy(xg + row[s] * K, x + (x_per_slot ? s : s / k) * ld_x, size_t(K) * sizeof(float));
  });
  for (int64_t e = 0; e < E; ++e)
    if (first[e + 1] > first[e]) multiply(e, yg + first[e] * N, N, xg + first[e] * K, K, first[e + 1] - first[e]);
  if (weights == nullptr) {
    for_rows(pool, slots, N, [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) std::memcpy(out + s * ld_out, yg + row[s] * N, size_t(N) * sizeof(float));
    });
    return;
  }
  for_rows(pool, M, k * N, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      float* o = out + m * ld_out;
      std::fill(o, o + N, 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        const float w = weights[m * k + j];
        const float* y = yg + row[m * k + j] * N;
        for (int64_t n = 0; n < N; ++n) o[n] += w * y[n];
      }
    }
  });
}

}  // namespace minfer::cpu
