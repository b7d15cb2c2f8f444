// Device code shared by the attention kernels: one warp attending one query to a range of keys
// with an online softmax.
//
// The warp walks keys t = first, first + stride, ... < end. For each key the lanes split the
// head dimension (lane l holds dimensions l, l + 32, ...), multiply with q, and a warp sum gives
// the score; then the running state takes the key as a block of one (kernels/ref/online_softmax.h),
// so after the last key acc / sum is the softmax-weighted sum of the values, and partial states
// of disjoint key ranges combine exactly (that is what makes split-K flash-decoding work).
#pragma once

#include "kernels/cuda/common.cuh"
#include "kernels/ref/attention.h"
#include "kernels/ref/kv_store.h"
#include "kernels/ref/online_softmax.h"

namespace minfer::cuda {

constexpr int kMaxHeadDim = 256;
constexpr int kDimsPerLane = kMaxHeadDim / kWarpSize;

struct WarpAttention {
  OnlineSoftmax softmax;         // running max and sum of the scores
  float acc[kDimsPerLane] = {};  // running weighted sum, dimension lane + 32 j
};

// The keys and values of one (sequence, KV head): position t's at keys + offset(t), found through
// the sequence's block table (kernels/ref/kv_store.h).
template <class T>
struct HeadRows {
  const T* keys;    // the layer's caches, (n_blocks, n_kv_heads, block_size, head_dim)
  const T* values;
  ref::KvBlockTable table;
  int64_t seq, kv_head, n_kv_heads, head_dim;
  __device__ __forceinline__ int64_t offset(int64_t t) const {
    return ref::kv_cache_offset(table, seq, kv_head, t, n_kv_heads, head_dim);
  }
};

// The rows query head h of row m attends to (grouped-query attention: KV head h / group).
template <class T>
__device__ __forceinline__ HeadRows<T> head_rows(const AttentionArgs& a, int64_t m, int64_t h) {
  return {static_cast<const T*>(a.k_cache), static_cast<const T*>(a.v_cache), a.table, a.seq[m],
          h / (a.n_heads / a.n_kv_heads), a.n_kv_heads, a.head_dim};
}

// q_scaled: this lane's dimensions of q already multiplied by the score scale.
template <class T>
__device__ __forceinline__ void warp_attend(WarpAttention& state, const float (&q_scaled)[kDimsPerLane],
                                            const HeadRows<T>& rows, int head_dim, int64_t first, int64_t end,
                                            int64_t stride) {
  const int lane = threadIdx.x % kWarpSize;
  for (int64_t t = first; t < end; t += stride) {
    const int64_t at = rows.offset(t);
    const T* key = rows.keys + at;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < kDimsPerLane; ++j) {
      const int d = lane + kWarpSize * j;
      if (d < head_dim) s += q_scaled[j] * to_float(key[d]);
    }
    s = warp_sum(s);
    const float correction = state.softmax.raise_max(s);
    const float p = softmax_rescale(s, state.softmax.max);
    state.softmax.sum += p;
    const T* value = rows.values + at;
#pragma unroll
    for (int j = 0; j < kDimsPerLane; ++j) {
      const int d = lane + kWarpSize * j;
      if (d < head_dim) state.acc[j] = state.acc[j] * correction + p * to_float(value[d]);
    }
  }
}

// The prefill kernel's tiles (attention_prefill.cuh): rows 64 t .. 64 t + 63 of a step.
constexpr int kPrefillTileRows = 64;

// Whether the tile that holds row m is one prompt's: its rows consecutive positions of one
// sequence. When a step has both kinds, the prefill kernel runs such tiles on Tensor Cores and
// flash-decoding every other tile's rows (a mixed serving step's decode rows), and both ask here,
// so each row is attended once. Every thread of a one-dimensional block must call it (it ends in
// a barrier); all get the answer.
__device__ __forceinline__ bool tile_is_one_prompt(const AttentionArgs& a, int64_t m) {
  const int64_t m0 = m / kPrefillTileRows * kPrefillTileRows;
  const int64_t rows = min(int64_t(kPrefillTileRows), a.M - m0);
  const int32_t seq0 = a.seq[m0], pos0 = a.pos[m0];
  bool one = true;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    one = one && a.seq[m0 + r] == seq0 && a.pos[m0 + r] == pos0 + r;
  return __syncthreads_and(one) != 0;
}

// This lane's dimensions of row q (head_dim wide), scaled.
__device__ __forceinline__ void load_query(float (&q_scaled)[kDimsPerLane], const float* q, int head_dim,
                                           float scale) {
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int j = 0; j < kDimsPerLane; ++j) {
    const int d = lane + kWarpSize * j;
    q_scaled[j] = d < head_dim ? q[d] * scale : 0.0f;
  }
}

}  // namespace minfer::cuda
