#include "kernels/cpu/attention.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/simd.h"
#include "kernels/ref/kv_store.h"

namespace minfer::cpu {

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Rows = Eigen::Map<const RowMajor, 0, Eigen::OuterStride<>>;
using Vector = Eigen::Map<Eigen::VectorXf>;
using ConstVector = Eigen::Map<const Eigen::VectorXf>;

// Keys per block of the online variant: 64 scores live in registers and L1.
constexpr int64_t kKeyBlock = 64;

// The scores and weighted sum (below) as function pointers, for a cache of type W (simd::F32 or
// simd::F16): the arguments of scores() and weighted_sum().
template <class W>
using ScoresFn = void (*)(float*, const float*, const typename W::Stored*, int64_t, int64_t, float,
                          const typename W::Stored*, int64_t);
template <class W>
using WeightedSumFn = void (*)(float*, const float*, const typename W::Stored*, int64_t, int64_t, bool,
                               const typename W::Stored*, int64_t);
template <class W>
using KernelPair = std::pair<ScoresFn<W>, WeightedSumFn<W>>;

// Plain loops for any head_dim: the f16 cache's fallback where there are no vectorised kernels for
// its head size (not whole vectors, above 128, or a build without AVX2); an f32 cache falls back
// to Eigen instead.
template <class W>
void scores_scalar(float* score, const float* q, const typename W::Stored* keys, int64_t stride, int64_t n,
                   float scale, const typename W::Stored*, int64_t) {
  for (int64_t t = 0; t < n; ++t) {
    float dot = 0.0f;
    for (int64_t i = 0; i < stride; ++i) dot += q[i] * W::scalar(keys + t * stride + i);
    score[t] = dot * scale;
  }
}
template <class W>
void weighted_sum_scalar(float* out, const float* p, const typename W::Stored* values, int64_t stride, int64_t n,
                         bool accumulate, const typename W::Stored*, int64_t) {
  if (!accumulate) std::fill(out, out + stride, 0.0f);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < stride; ++i) out[i] += p[t] * W::scalar(values + t * stride + i);
}

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
// note: with AVX-512 or AVX2 and head_dim a multiple of the vector width L (16 or 8 floats) the
// two inner loops are hand-vectorised: q sits in HV vectors, each key costs HV FMAs into its own
// accumulator, and L keys' accumulators are reduced to L scores by one shared transpose-and-add
// (simd::sum_each) instead of L horizontal sums. Eigen's general matrix-vector product spends
// most of its time on setup at these tiny sizes (on AVX2, at head_dim 48 and 16 sequences, the
// Eigen path streamed the cache at about a third of the bandwidth; bench/results/NOTES.md).
constexpr int L = simd::kWidth;

// Requests rows [t0, t0 + 16) of `rows` (up to n_rows; rows of L * HV values) into the cache.
// note: the keys and values of one head are short contiguous blocks (a few KB at the context
// lengths of decode), too short for the hardware prefetcher to ramp up on, and a decode step
// for a batch reads one block per (sequence, head). So each head's kernels request the next
// head's block alongside the rows they are reading of their own: block t0 of the next head while
// computing block t0 of this one, a whole head's time ahead of its use (a few percent at 128
// keys with the caches in DRAM; bench/results/NOTES.md).
template <class W, int HV>
inline void prefetch_rows(const typename W::Stored* rows, int64_t n_rows, int64_t t0) {
  if (rows == nullptr) return;
  constexpr int64_t line = 64 / sizeof(typename W::Stored);  // elements per 64-byte cache line
  const int64_t end = std::min(n_rows, t0 + 16) * L * HV;
  for (int64_t i = t0 * L * HV; i < end; i += line) __builtin_prefetch(rows + i);
}

// score[t] = scale * q . keys[t] for t < n (keys at row stride `stride`, which is L * HV); the
// rows of next_keys (n_next of them) are prefetched on the way, 16 rows per 16 keys.
template <class W, int HV>
void scores(float* score, const float* q, const typename W::Stored* keys, int64_t stride, int64_t n, float scale,
            const typename W::Stored* next_keys, int64_t n_next) {
  simd::Vec qv[HV];
  for (int j = 0; j < HV; ++j) qv[j] = simd::load(q + L * j);
  const simd::Vec scale_v = simd::set1(scale);
  for (int64_t t0 = 0; t0 < n; t0 += L) {
    if (t0 % 16 == 0) prefetch_rows<W, HV>(next_keys, n_next, t0);
    const int64_t count = std::min<int64_t>(L, n - t0);
    simd::Vec acc[L];
    for (int i = 0; i < L; ++i) acc[i] = simd::zero();
    // j outside, keys inside: the L accumulators are L independent FMA chains.
    if (count == L) {
      for (int j = 0; j < HV; ++j)
        for (int i = 0; i < L; ++i) acc[i] = simd::fma(qv[j], W::load(keys + (t0 + i) * stride + L * j), acc[i]);
    } else {
      for (int j = 0; j < HV; ++j)
        for (int64_t i = 0; i < count; ++i) acc[i] = simd::fma(qv[j], W::load(keys + (t0 + i) * stride + L * j), acc[i]);
    }
    simd::Vec sums = simd::mul(simd::sum_each(acc), scale_v);
    if (count == L) {
      simd::store(score + t0, sums);
    } else {
      alignas(64) float tail[L];
      simd::store(tail, sums);
      std::copy(tail, tail + count, score + t0);
    }
  }
  for (int64_t t0 = (n + 15) / 16 * 16; t0 < n_next; t0 += 16) prefetch_rows<W, HV>(next_keys, n_next, t0);
}

// out (+)= sum_t p[t] * values[t] for t < n; `accumulate` adds to out instead of overwriting. The
// rows of next_values (n_next of them) are prefetched on the way.
template <class W, int HV>
void weighted_sum(float* out, const float* p, const typename W::Stored* values, int64_t stride, int64_t n,
                  bool accumulate, const typename W::Stored* next_values, int64_t n_next) {
  // Sets of accumulators: keys t, t+1, ... feed independent FMA chains. AVX2 has 16 vector
  // registers, so there the sets shrink as the head grows, to one set of HV from head_dim 104 on
  // (which spills at 128: 16 accumulators, unmeasured).
  constexpr int U = L == 16 ? 4 : std::clamp(12 / HV, 1, 4);
  simd::Vec o[U][HV];
  for (int u = 0; u < U; ++u)
    for (int j = 0; j < HV; ++j) o[u][j] = u == 0 && accumulate ? simd::load(out + L * j) : simd::zero();
  int64_t t = 0, prefetched = 0;  // rows of next_values requested so far, 16 at a time
  for (; t + U <= n; t += U) {
    if (t >= prefetched) {
      prefetch_rows<W, HV>(next_values, n_next, prefetched);
      prefetched += 16;
    }
    for (int u = 0; u < U; ++u) {
      const simd::Vec pt = simd::set1(p[t + u]);
      for (int j = 0; j < HV; ++j) o[u][j] = simd::fma(pt, W::load(values + (t + u) * stride + L * j), o[u][j]);
    }
  }
  for (int64_t t0 = prefetched; t0 < n_next; t0 += 16) prefetch_rows<W, HV>(next_values, n_next, t0);
  for (; t < n; ++t) {
    const simd::Vec pt = simd::set1(p[t]);
    for (int j = 0; j < HV; ++j) o[0][j] = simd::fma(pt, W::load(values + t * stride + L * j), o[0][j]);
  }
  for (int j = 0; j < HV; ++j) {
    simd::Vec total = o[0][j];
    for (int u = 1; u < U; ++u) total = simd::add(total, o[u][j]);
    simd::store(out + L * j, total);
  }
}

template <class W, int... HV>
KernelPair<W> kernels_up_to(int64_t vectors, std::integer_sequence<int, HV...>) {
  KernelPair<W> found{nullptr, nullptr};
  ((vectors == HV + 1 ? (found = {scores<W, HV + 1>, weighted_sum<W, HV + 1>}, 0) : 0), ...);
  return found;
}

// The vectorised pair for head_dim = L * HV up to 128, or nulls.
template <class W>
KernelPair<W> simd_kernels(int64_t head_dim) {
  if (head_dim % L != 0 || head_dim > 128) return {nullptr, nullptr};
  return kernels_up_to<W>(head_dim / L, std::make_integer_sequence<int, 128 / L>());
}
#else
template <class W>
KernelPair<W> simd_kernels(int64_t) { return {nullptr, nullptr}; }
#endif

// One attention over caches of type W (simd::F32 or simd::F16).
template <AttentionAlgorithm A, class W>
void attention_over(ThreadPool& pool, float* out, int64_t ld_out, const float* q, int64_t ld_q,
                    const typename W::Stored* k_cache, const typename W::Stored* v_cache, const int32_t* seq,
                    const int32_t* pos, int64_t M, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                    int64_t n_ctx) {
  using Stored = typename W::Stored;
  constexpr bool f32_cache = std::is_same_v<W, simd::F32>;
  // note: keys and values of one KV head are contiguous rows of head_dim (the cache is head-major).
  const int64_t stride = head_dim;  // between consecutive positions of one head
  const int64_t group = n_heads / n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  // Vectorised kernels where the head is whole vectors; otherwise Eigen (f32) or plain loops (f16).
  KernelPair<W> kernels = simd_kernels<W>(head_dim);
  if (!f32_cache && kernels.first == nullptr) kernels = {scores_scalar<W>, weighted_sum_scalar<W>};
  // Where task (row m, head h) finds its keys and values in the caches, and how many there are.
  auto block_of = [&](int64_t task, int64_t* n_keys) {
    const int64_t m = task / n_heads, h = task % n_heads;
    *n_keys = int64_t(pos[m]) + 1;
    return ref::kv_cache_offset(seq[m], h / group, 0, n_kv_heads, n_ctx, head_dim);
  };
  // score (n) = scale * keys (n, head_dim) q, and out (+)= values (n, head_dim)^T p.
  auto score_block = [&](float* score, const float* qh, const Stored* keys, int64_t n, const Stored* next,
                         int64_t n_next) {
    if (kernels.first != nullptr) {
      kernels.first(score, qh, keys, stride, n, scale, next, n_next);
    } else if constexpr (f32_cache) {
      Vector(score, n).noalias() = (Rows(keys, n, head_dim, Eigen::OuterStride<>(stride)) * ConstVector(qh, head_dim)) * scale;
    }
  };
  auto weigh_block = [&](float* oh, const float* p, const Stored* values, int64_t n, bool accumulate,
                         const Stored* next, int64_t n_next) {
    if (kernels.second != nullptr) {
      kernels.second(oh, p, values, stride, n, accumulate, next, n_next);
    } else if constexpr (f32_cache) {
      Rows v(values, n, head_dim, Eigen::OuterStride<>(stride));
      if (accumulate) {
        Vector(oh, head_dim).noalias() += v.transpose() * ConstVector(p, n);
      } else {
        Vector(oh, head_dim).noalias() = v.transpose() * ConstVector(p, n);
      }
    }
  };
  // `next`: the task this thread runs after this one, whose block is prefetched; -1 for none.
  auto one_head = [&](int64_t task, int64_t next) {
    const int64_t m = task / n_heads, h = task % n_heads;
    int64_t n_keys = 0, n_next = 0;
    const int64_t offset = block_of(task, &n_keys);
    const int64_t next_offset = next >= 0 ? block_of(next, &n_next) : 0;
    const Stored* next_keys = next >= 0 ? k_cache + next_offset : nullptr;
    const Stored* next_values = next >= 0 ? v_cache + next_offset : nullptr;
    const float* qh = q + m * ld_q + h * head_dim;
    Vector oh(out + m * ld_out + h * head_dim, head_dim);
    // note: 64-byte aligned like every other buffer: Eigen's vectorised sums start with a scalar
    // prologue up to the first aligned element, so a buffer whose alignment differed from thread
    // to thread would make the result depend on which thread ran the task.
    thread_local std::vector<float, Eigen::aligned_allocator<float>> scratch;  // grows once
    if (A == AttentionAlgorithm::three_pass) {
      scratch.resize(static_cast<size_t>(n_keys));
      Vector score(scratch.data(), n_keys);
      score_block(score.data(), qh, k_cache + offset, n_keys, next_keys, n_next);
      float max_score = score.maxCoeff();
      score = (score.array() - max_score).exp().matrix();
      score /= score.sum();
      weigh_block(oh.data(), score.data(), v_cache + offset, n_keys, false, next_values, n_next);
    } else {
      scratch.resize(static_cast<size_t>(kKeyBlock));
      float running_max = -INFINITY, running_sum = 0.0f;
      oh.setZero();
      for (int64_t t0 = 0; t0 < n_keys; t0 += kKeyBlock) {
        const int64_t n = std::min(kKeyBlock, n_keys - t0);
        // The same block of the next head, or all that is left of it after the last block.
        const int64_t n_next_block = std::max<int64_t>(0, t0 + n < n_keys ? std::min(n, n_next - t0) : n_next - t0);
        const Stored* next_key_block = n_next_block > 0 ? next_keys + t0 * stride : nullptr;
        const Stored* next_value_block = n_next_block > 0 ? next_values + t0 * stride : nullptr;
        Vector score(scratch.data(), n);
        score_block(score.data(), qh, k_cache + offset + t0 * stride, n, next_key_block, n_next_block);
        float new_max = std::max(running_max, score.maxCoeff());
        float correction = std::exp(running_max - new_max);  // 0 on the first block
        score = (score.array() - new_max).exp().matrix();
        running_sum = running_sum * correction + score.sum();
        oh = oh * correction;
        weigh_block(oh.data(), score.data(), v_cache + offset + t0 * stride, n, true, next_value_block,
                    n_next_block);
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

}  // namespace

template <AttentionAlgorithm A>
void attention(ThreadPool& pool, float* out, int64_t ld_out, const float* q, int64_t ld_q,
               const void* k_cache, const void* v_cache, DType cache_dtype, const int32_t* seq,
               const int32_t* pos, int64_t M, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
               int64_t n_ctx) {
  if (cache_dtype == DType::f16) {
    attention_over<A, simd::F16>(pool, out, ld_out, q, ld_q, static_cast<const uint16_t*>(k_cache),
                                 static_cast<const uint16_t*>(v_cache), seq, pos, M, n_heads, n_kv_heads,
                                 head_dim, n_ctx);
  } else {
    MINFER_CHECK(cache_dtype == DType::f32, "attention: the CPU keeps an f32 or f16 KV cache, not ",
                 dtype_name(cache_dtype));
    attention_over<A, simd::F32>(pool, out, ld_out, q, ld_q, static_cast<const float*>(k_cache),
                                 static_cast<const float*>(v_cache), seq, pos, M, n_heads, n_kv_heads,
                                 head_dim, n_ctx);
  }
}

template void attention<AttentionAlgorithm::three_pass>(ThreadPool&, float*, int64_t, const float*, int64_t,
                                                        const void*, const void*, DType, const int32_t*,
                                                        const int32_t*, int64_t, int64_t, int64_t, int64_t,
                                                        int64_t);
template void attention<AttentionAlgorithm::online_softmax>(ThreadPool&, float*, int64_t, const float*, int64_t,
                                                            const void*, const void*, DType, const int32_t*,
                                                            const int32_t*, int64_t, int64_t, int64_t, int64_t,
                                                            int64_t);

}  // namespace minfer::cpu
