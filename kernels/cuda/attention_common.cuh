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
#include "kernels/ref/online_softmax.h"

namespace minfer::cuda {

constexpr int kMaxHeadDim = 256;
constexpr int kDimsPerLane = kMaxHeadDim / kWarpSize;

struct WarpAttention {
  OnlineSoftmax softmax;         // running max and sum of the scores
  float acc[kDimsPerLane] = {};  // running weighted sum, dimension lane + 32 j
};

// q_scaled: this lane's dimensions of q already multiplied by the score scale.
// keys, values: (positions, head_dim) of one sequence and KV head.
template <class T>
__device__ __forceinline__ void warp_attend(WarpAttention& state, const float (&q_scaled)[kDimsPerLane],
                                            const T* keys, const T* values, int head_dim, int64_t first,
                                            int64_t end, int64_t stride) {
  const int lane = threadIdx.x % kWarpSize;
  for (int64_t t = first; t < end; t += stride) {
    const T* key = keys + t * head_dim;
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
    const T* value = values + t * head_dim;
#pragma unroll
    for (int j = 0; j < kDimsPerLane; ++j) {
      const int d = lane + kWarpSize * j;
      if (d < head_dim) state.acc[j] = state.acc[j] * correction + p * to_float(value[d]);
    }
  }
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
