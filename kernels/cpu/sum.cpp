#include "kernels/cpu/sum.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/simd.h"

namespace minfer::cpu {

namespace {
constexpr int64_t kBlock = 1 << 16;  // floats per block: 256 KiB

float sum_block(const float* x, int64_t n) {
  constexpr int U = 8;
  constexpr int VW = simd::kWidth;
  // note: a software prefetch 1 KiB ahead on top of the hardware prefetcher, which it beat
  // (bench/results/NOTES.md, "Bandwidth probe"): the probe should be the fastest read the machine does.
  constexpr int64_t kPrefetch = 256;
  simd::Vec acc[U];
  for (auto& a : acc) a = simd::zero();
  int64_t i = 0;
  for (; i + U * VW <= n; i += U * VW) {
    __builtin_prefetch(x + i + kPrefetch);
    for (int u = 0; u < U; ++u) acc[u] = simd::add(acc[u], simd::load(x + i + u * VW));
  }
  simd::Vec total = acc[0];
  for (int u = 1; u < U; ++u) total = simd::add(total, acc[u]);
  float s = simd::sum(total);
  for (; i < n; ++i) s += x[i];
  return s;
}
}  // namespace

void sum(ThreadPool& pool, float* out, const float* x, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  thread_local std::vector<float> partial;  // the caller's thread only: grows once
  partial.assign(static_cast<size_t>(blocks), 0.0f);
  float* partial_sums = partial.data();
  pool.parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      partial_sums[b] = sum_block(x + b * kBlock, std::min(kBlock, n - b * kBlock));
  });
  float total = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) total += partial_sums[b];
  out[0] = total;
}

}  // namespace minfer::cpu
