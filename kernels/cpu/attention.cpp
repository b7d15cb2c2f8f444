#include "kernels/cpu/attention.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "kernels/cpu/simd.h"

namespace minfer::cpu {

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Rows = Eigen::Map<const RowMajor, 0, Eigen::OuterStride<>>;
using Vector = Eigen::Map<Eigen::VectorXf>;
using ConstVector = Eigen::Map<const Eigen::VectorXf>;

// Keys per block of the online variant: 64 scores live in registers and L1.
constexpr int64_t kKeyBlock = 64;

// The hand-vectorised scores and weighted sum (below) as function pointers: the arguments of
// scores() and weighted_sum().
using ScoresFn = void (*)(float*, const float*, const float*, int64_t, int64_t, float, const float*, int64_t);
using WeightedSumFn = void (*)(float*, const float*, const float*, int64_t, int64_t, bool, const float*, int64_t);

#if defined(__AVX512F__)
// note: with AVX-512 and head_dim a multiple of 16 the two inner loops are hand-vectorised: q sits
// in HV registers, each key costs HV FMAs into its own accumulator, and 16 keys' accumulators are
// reduced to 16 scores by one shared transpose (simd::sum16) instead of 16 horizontal sums.
// Eigen's general matrix-vector product spends most of its time on setup at these tiny sizes.

// Requests rows [t0, t0 + 16) of `rows` (up to n_rows; rows of 16 * HV floats) into the cache.
// note: the keys and values of one head are short contiguous blocks (a few KB at the context
// lengths of decode), too short for the hardware prefetcher to ramp up on, and a decode step
// for a batch reads one block per (sequence, head). So each head's kernels request the next
// head's block alongside the rows they are reading of their own: block t0 of the next head while
// computing block t0 of this one, a whole head's time ahead of its use (a few percent at 128
// keys with the caches in DRAM; bench/results/NOTES.md).
template <int HV>
inline void prefetch_rows(const float* rows, int64_t n_rows, int64_t t0) {
  if (rows == nullptr) return;
  const int64_t end = std::min(n_rows, t0 + 16) * 16 * HV;
  for (int64_t i = t0 * 16 * HV; i < end; i += 16) __builtin_prefetch(rows + i);
}

// score[t] = scale * q . keys[t] for t < n (keys at row stride `stride`, which is 16 * HV); the
// rows of next_keys (n_next of them) are prefetched on the way.
template <int HV>
void scores(float* score, const float* q, const float* keys, int64_t stride, int64_t n, float scale,
            const float* next_keys, int64_t n_next) {
  simd::Vec qv[HV];
  for (int j = 0; j < HV; ++j) qv[j] = simd::load(q + 16 * j);
  const simd::Vec scale_v = simd::set1(scale);
  for (int64_t t0 = 0; t0 < n; t0 += 16) {
    prefetch_rows<HV>(next_keys, n_next, t0);
    const int64_t count = std::min<int64_t>(16, n - t0);
    simd::Vec acc[16];
    for (int i = 0; i < 16; ++i) acc[i] = simd::zero();
    // j outside, keys inside: the 16 accumulators are 16 independent FMA chains.
    if (count == 16) {
      for (int j = 0; j < HV; ++j)
        for (int i = 0; i < 16; ++i) acc[i] = simd::fma(qv[j], simd::load(keys + (t0 + i) * stride + 16 * j), acc[i]);
    } else {
      for (int j = 0; j < HV; ++j)
        for (int64_t i = 0; i < count; ++i) acc[i] = simd::fma(qv[j], simd::load(keys + (t0 + i) * stride + 16 * j), acc[i]);
    }
    simd::Vec sums = simd::mul(simd::sum16(acc), scale_v);
    if (count == 16) {
      simd::store(score + t0, sums);
    } else {
      alignas(64) float tail[16];
      simd::store(tail, sums);
      std::copy(tail, tail + count, score + t0);
    }
  }
  for (int64_t t0 = (n + 15) / 16 * 16; t0 < n_next; t0 += 16) prefetch_rows<HV>(next_keys, n_next, t0);
}

// out (+)= sum_t p[t] * values[t] for t < n; `accumulate` adds to out instead of overwriting. The
// rows of next_values (n_next of them) are prefetched on the way.
template <int HV>
void weighted_sum(float* out, const float* p, const float* values, int64_t stride, int64_t n, bool accumulate,
                  const float* next_values, int64_t n_next) {
  constexpr int U = 4;  // sets of accumulators: keys t, t+1, t+2, t+3 feed independent FMA chains
  simd::Vec o[U][HV];
  for (int u = 0; u < U; ++u)
    for (int j = 0; j < HV; ++j) o[u][j] = u == 0 && accumulate ? simd::load(out + 16 * j) : simd::zero();
  int64_t t = 0;
  for (; t + U <= n; t += U) {
    if (t % 16 == 0) prefetch_rows<HV>(next_values, n_next, t);
    for (int u = 0; u < U; ++u) {
      const simd::Vec pt = simd::set1(p[t + u]);
      for (int j = 0; j < HV; ++j) o[u][j] = simd::fma(pt, simd::load(values + (t + u) * stride + 16 * j), o[u][j]);
    }
  }
  for (int64_t t0 = (t + 15) / 16 * 16; t0 < n_next; t0 += 16) prefetch_rows<HV>(next_values, n_next, t0);
  for (; t < n; ++t) {
    const simd::Vec pt = simd::set1(p[t]);
    for (int j = 0; j < HV; ++j) o[0][j] = simd::fma(pt, simd::load(values + t * stride + 16 * j), o[0][j]);
  }
  for (int j = 0; j < HV; ++j)
    simd::store(out + 16 * j, simd::add(simd::add(o[0][j], o[1][j]), simd::add(o[2][j], o[3][j])));
}


template <int HV>
constexpr std::pair<ScoresFn, WeightedSumFn> kernels_for() {
  return {scores<HV>, weighted_sum<HV>};
}

// The vectorised pair for head_dim = 16 * HV (HV up to 8), or nulls.
std::pair<ScoresFn, WeightedSumFn> simd_kernels(int64_t head_dim) {
  switch (head_dim) {
    case 16: return kernels_for<1>();
    case 32: return kernels_for<2>();
    case 48: return kernels_for<3>();
    case 64: return kernels_for<4>();
    case 80: return kernels_for<5>();
    case 96: return kernels_for<6>();
    case 112: return kernels_for<7>();
    case 128: return kernels_for<8>();
    default: return {nullptr, nullptr};
  }
}
#else
std::pair<ScoresFn, WeightedSumFn> simd_kernels(int64_t) { return {nullptr, nullptr}; }
#endif

}  // namespace

template <AttentionAlgorithm A>
void attention(ThreadPool& pool, float* out, int64_t ld_out, const float* q, int64_t ld_q,
               const float* k_cache, const float* v_cache, const int32_t* seq, const int32_t* pos,
               int64_t M, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t n_ctx) {
  // note: keys and values of one KV head are contiguous rows of head_dim (the cache is head-major).
  const int64_t stride = head_dim;  // between consecutive positions of one head
  const int64_t group = n_heads / n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const auto simd = simd_kernels(head_dim);
  // Where task (row m, head h) finds its keys and values in the caches, and how many there are.
  auto block_of = [&](int64_t task, int64_t* n_keys) {
    const int64_t m = task / n_heads, h = task % n_heads;
    *n_keys = int64_t(pos[m]) + 1;
    return (int64_t(seq[m]) * n_kv_heads + h / group) * n_ctx * head_dim;
  };
  // `next`: the task this thread runs after this one, whose block is prefetched; -1 for none.
  auto one_head = [&](int64_t task, int64_t next) {
    const int64_t m = task / n_heads, h = task % n_heads;
    int64_t n_keys = 0, n_next = 0;
    const int64_t offset = block_of(task, &n_keys);
    const int64_t next_offset = next >= 0 ? block_of(next, &n_next) : 0;
    const float* next_keys = next >= 0 ? k_cache + next_offset : nullptr;
    const float* next_values = next >= 0 ? v_cache + next_offset : nullptr;
    ConstVector qh(q + m * ld_q + h * head_dim, head_dim);
    Vector oh(out + m * ld_out + h * head_dim, head_dim);
    // note: 64-byte aligned like every other buffer: Eigen's vectorised sums start with a scalar
    // prologue up to the first aligned element, so a buffer whose alignment differed from thread
    // to thread would make the result depend on which thread ran the task.
    thread_local std::vector<float, Eigen::aligned_allocator<float>> scratch;  // grows once
    if (A == AttentionAlgorithm::three_pass) {
      scratch.resize(static_cast<size_t>(n_keys));
      Vector score(scratch.data(), n_keys);
      Rows keys(k_cache + offset, n_keys, head_dim, Eigen::OuterStride<>(stride));
      Rows values(v_cache + offset, n_keys, head_dim, Eigen::OuterStride<>(stride));
      if (simd.first) {
        simd.first(score.data(), qh.data(), k_cache + offset, stride, n_keys, scale, next_keys, n_next);
      } else {
        score.noalias() = (keys * qh) * scale;
      }
      float max_score = score.maxCoeff();
      score = (score.array() - max_score).exp().matrix();
      score /= score.sum();
      if (simd.second) {
        simd.second(oh.data(), score.data(), v_cache + offset, stride, n_keys, false, next_values, n_next);
      } else {
        oh.noalias() = values.transpose() * score;
      }
    } else {
      scratch.resize(static_cast<size_t>(kKeyBlock));
      float running_max = -INFINITY, running_sum = 0.0f;
      oh.setZero();
      for (int64_t t0 = 0; t0 < n_keys; t0 += kKeyBlock) {
        const int64_t n = std::min(kKeyBlock, n_keys - t0);
        // The same block of the next head, or all that is left of it after the last block.
        const int64_t n_next_block = std::max<int64_t>(0, t0 + n < n_keys ? std::min(n, n_next - t0) : n_next - t0);
        const float* next_key_block = n_next_block > 0 ? next_keys + t0 * stride : nullptr;
        const float* next_value_block = n_next_block > 0 ? next_values + t0 * stride : nullptr;
        Vector score(scratch.data(), n);
        Rows keys(k_cache + offset + t0 * stride, n, head_dim, Eigen::OuterStride<>(stride));
        Rows values(v_cache + offset + t0 * stride, n, head_dim, Eigen::OuterStride<>(stride));
        if (simd.first) {
          simd.first(score.data(), qh.data(), k_cache + offset + t0 * stride, stride, n, scale, next_key_block,
                     n_next_block);
        } else {
          score.noalias() = (keys * qh) * scale;
        }
        float new_max = std::max(running_max, score.maxCoeff());
        float correction = std::exp(running_max - new_max);  // 0 on the first block
        score = (score.array() - new_max).exp().matrix();
        running_sum = running_sum * correction + score.sum();
        oh = oh * correction;
        if (simd.second) {
          simd.second(oh.data(), score.data(), v_cache + offset + t0 * stride, stride, n, true, next_value_block,
                      n_next_block);
        } else {
          oh.noalias() += values.transpose() * score;
        }
        running_max = new_max;
      }
      oh /= running_sum;
    }
  };
  const int64_t tasks = M * n_heads;
  if (pool.size() == 1 || tasks == 1) {
    for (int64_t t = 0; t < tasks; ++t) one_head(t, t + 1 < tasks ? t + 1 : -1);
  } else {
    pool.parallel_for(tasks, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) one_head(t, t + 1 < t1 ? t + 1 : -1);
    });
  }
}

template void attention<AttentionAlgorithm::three_pass>(ThreadPool&, float*, int64_t, const float*, int64_t, const float*,
                                                        const float*, const int32_t*, const int32_t*, int64_t,
                                                        int64_t, int64_t, int64_t, int64_t);
template void attention<AttentionAlgorithm::online_softmax>(ThreadPool&, float*, int64_t, const float*, int64_t,
                                                            const float*, const float*, const int32_t*,
                                                            const int32_t*, int64_t, int64_t, int64_t, int64_t,
                                                            int64_t);

}  // namespace minfer::cpu
