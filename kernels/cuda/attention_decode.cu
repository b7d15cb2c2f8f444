#include <cmath>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch_limits.h"
#include "kernels/ref/kv_store.h"

namespace minfer::cuda {

namespace {

constexpr int kWarps = 4;

template <class T>
__global__ void scores_kernel(AttentionArgs a, float* scores) {
  const int64_t m = blockIdx.x / a.n_heads, h = blockIdx.x % a.n_heads;
  const int64_t n_keys = int64_t(a.pos[m]) + 1;
  const HeadRows<T> rows = head_rows<T>(a, m, h);
  float q_scaled[kDimsPerLane];
  load_query(q_scaled, a.q + m * a.ld_q + h * a.head_dim, static_cast<int>(a.head_dim), a.scale);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  float* row = scores + blockIdx.x * a.table.positions();
  for (int64_t t = attention_first_key(a.pos[m], a.window) + warp; t < n_keys; t += kWarps) {
    const T* key = rows.keys + rows.offset(t);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < kDimsPerLane; ++j) {
      const int d = lane + kWarpSize * j;
      if (d < a.head_dim) s += q_scaled[j] * to_float(key[d]);
    }
    s = warp_sum(s);
    if (lane == 0) row[t] = s;
  }
}

__global__ void softmax_prefix_kernel(AttentionArgs a, float* scores) {
  __shared__ float shared[32];
  const int64_t m = blockIdx.x / a.n_heads;
  const int64_t first = attention_first_key(a.pos[m], a.window), n = int64_t(a.pos[m]) + 1 - first;
  float* row = scores + blockIdx.x * a.table.positions() + first;
  float local_max = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) local_max = fmaxf(local_max, row[i]);
  const float row_max = block_max(local_max, shared);
  float local_sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    row[i] = expf(row[i] - row_max);
    local_sum += row[i];
  }
  const float inverse = 1.0f / block_sum(local_sum, shared);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) row[i] *= inverse;
}

template <class T>
__global__ void weighted_sum_kernel(AttentionArgs a, const float* scores) {
  const int64_t m = blockIdx.x / a.n_heads, h = blockIdx.x % a.n_heads;
  const int64_t n_keys = int64_t(a.pos[m]) + 1;
  const HeadRows<T> rows = head_rows<T>(a, m, h);
  const float* p = scores + blockIdx.x * a.table.positions();
  for (int64_t d = threadIdx.x; d < a.head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t t = attention_first_key(a.pos[m], a.window); t < n_keys; ++t)
      acc += p[t] * to_float(rows.values[rows.offset(t) + d]);
    a.out[m * a.ld_out + h * a.head_dim + d] = acc;
  }
}

// Partial state of one chunk: [max, sum, weighted sum (head_dim)].
__device__ __forceinline__ float* partial_at(float* partials, const AttentionArgs& a, int64_t row_head, int64_t split,
                                             int64_t n_splits) {
  return partials + (row_head * n_splits + split) * (a.head_dim + 2);
}

// One block per (row, head) and split: the split's chunk of the keys the row sees (its window's
// first key to its position, flash_chunk_keys a chunk), its 4 warps taking every 4th key, their
// states combined in shared memory; then the partial state, or with a single split the output.
template <class T>
__global__ void flash_split_kernel(AttentionArgs a, float* partials, int64_t n_splits, bool skip_prompt_tiles) {
  __shared__ float warp_m[kWarps], warp_l[kWarps];
  __shared__ float warp_acc[kWarps][kMaxHeadDim];
  const int64_t row_head = blockIdx.x, split = blockIdx.y;
  const int64_t m = row_head / a.n_heads, h = row_head % a.n_heads;
  if (skip_prompt_tiles && tile_is_one_prompt(a, m)) return;  // the prefill kernel's rows
  const int64_t first_key = attention_first_key(a.pos[m], a.window), n_keys = int64_t(a.pos[m]) + 1 - first_key;
  const int64_t chunk = flash_chunk_keys(n_keys, n_splits);
  const int64_t first = first_key + split * chunk;
  if (split * chunk >= n_keys) return;  // a short row's unused split (flash_used_splits)
  const int64_t end = min(first + chunk, first_key + n_keys);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  WarpAttention state;
  float q_scaled[kDimsPerLane];
  load_query(q_scaled, a.q + m * a.ld_q + h * a.head_dim, static_cast<int>(a.head_dim), a.scale);
  warp_attend(state, q_scaled, head_rows<T>(a, m, h), static_cast<int>(a.head_dim), first + warp, end, kWarps);
  if (lane == 0) {
    warp_m[warp] = state.softmax.max;
    warp_l[warp] = state.softmax.sum;
  }
#pragma unroll
  for (int j = 0; j < kDimsPerLane; ++j) {
    const int d = lane + kWarpSize * j;
    if (d < a.head_dim) warp_acc[warp][d] = state.acc[j];
  }
  __syncthreads();
  // A warp that saw no key (a chunk of fewer than 4 keys) has m = -inf and weight 0
  // (softmax_rescale); the chunk holds at least one key, so block_m is finite.
  float block_m = -INFINITY, l = 0.0f;
  for (int w = 0; w < kWarps; ++w) block_m = fmaxf(block_m, warp_m[w]);
  for (int w = 0; w < kWarps; ++w) l += warp_l[w] * softmax_rescale(warp_m[w], block_m);
  float* partial = n_splits > 1 ? partial_at(partials, a, row_head, split, n_splits) : nullptr;
  for (int64_t d = threadIdx.x; d < a.head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int w = 0; w < kWarps; ++w) acc += warp_acc[w][d] * softmax_rescale(warp_m[w], block_m);
    if (partial != nullptr)
      partial[2 + d] = acc;
    else
      a.out[m * a.ld_out + h * a.head_dim + d] = acc / l;
  }
  if (partial != nullptr && threadIdx.x == 0) {
    partial[0] = block_m;
    partial[1] = l;
  }
}

// One block per (row, head): combines the partial states of the splits that held keys.
__global__ void flash_reduce_kernel(AttentionArgs a, const float* partials, int64_t n_splits, bool skip_prompt_tiles) {
  const int64_t row_head = blockIdx.x;
  const int64_t m = row_head / a.n_heads, h = row_head % a.n_heads;
  if (skip_prompt_tiles && tile_is_one_prompt(a, m)) return;
  const int64_t n_keys = int64_t(a.pos[m]) + 1 - attention_first_key(a.pos[m], a.window);
  const int64_t used = flash_used_splits(n_keys, n_splits);
  const float* first = partials + row_head * n_splits * (a.head_dim + 2);
  float global_m = -INFINITY;
  for (int64_t s = 0; s < used; ++s) global_m = fmaxf(global_m, first[s * (a.head_dim + 2)]);
  float l = 0.0f;
  for (int64_t s = 0; s < used; ++s) {
    const float* p = first + s * (a.head_dim + 2);
    l += p[1] * softmax_rescale(p[0], global_m);
  }
  for (int64_t d = threadIdx.x; d < a.head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t s = 0; s < used; ++s) {
      const float* p = first + s * (a.head_dim + 2);
      acc += p[2 + d] * softmax_rescale(p[0], global_m);
    }
    a.out[m * a.ld_out + h * a.head_dim + d] = acc / l;
  }
}

void check_head_dim(int64_t head_dim) {
  MINFER_CHECK(head_dim <= kMaxHeadDim, "CUDA attention supports head_dim up to ", kMaxHeadDim, ", got ", head_dim);
}

}  // namespace

int64_t attention_scores_floats(int64_t M, int64_t n_heads, int64_t n_ctx) { return M * n_heads * n_ctx; }

int64_t flash_decode_floats(int64_t M, int64_t n_heads, int64_t head_dim, int64_t n_splits) {
  return n_splits > 1 ? M * n_heads * n_splits * (head_dim + 2) : 0;
}

void attention_three_pass(cudaStream_t stream, const AttentionArgs& a, float* scores) {
  if (a.M == 0) return;
  check_head_dim(a.head_dim);
  const unsigned blocks = static_cast<unsigned>(a.M * a.n_heads);
  dispatch_float_type(a.cache_dtype, [&](auto type) {
    using T = decltype(type);
    scores_kernel<T><<<blocks, kWarps * kWarpSize, 0, stream>>>(a, scores);
    CUDA_CHECK_LAUNCH();
    softmax_prefix_kernel<<<blocks, 256, 0, stream>>>(a, scores);
    CUDA_CHECK_LAUNCH();
    weighted_sum_kernel<T><<<blocks, 128, 0, stream>>>(a, scores);
    CUDA_CHECK_LAUNCH();
  });
}

void attention_flash_decode(cudaStream_t stream, const AttentionArgs& a, int64_t n_splits, bool skip_prompt_tiles,
                            float* partials) {
  if (a.M == 0) return;
  check_head_dim(a.head_dim);
  MINFER_CHECK(n_splits >= 1 && n_splits <= 65535 && (n_splits == 1 || partials != nullptr),
               "flash-decoding: ", n_splits, " splits", partials == nullptr ? " and no partials" : "");
  const unsigned row_heads = static_cast<unsigned>(a.M * a.n_heads);
  dispatch_float_type(a.cache_dtype, [&](auto type) {
    using T = decltype(type);
    flash_split_kernel<T><<<dim3(row_heads, static_cast<unsigned>(n_splits)), kWarps * kWarpSize, 0, stream>>>(
        a, partials, n_splits, skip_prompt_tiles);
    CUDA_CHECK_LAUNCH();
    if (n_splits > 1) {
      flash_reduce_kernel<<<row_heads, 128, 0, stream>>>(a, partials, n_splits, skip_prompt_tiles);
      CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace minfer::cuda
