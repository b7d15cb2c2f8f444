// Attention by (row, head): a few query rows (one per sequence in decode), each attending to the
// cached positions of its sequence up to its own (those of its window where the layer has one).
// Keys and values are read through each sequence's block table (kernels/ref/kv_store.h), key by
// key; n_ctx below is the positions a sequence's table can hold (KvBlockTable::positions). The
// two algorithms of kernels/ref/attention.h:
//
// three_pass: three kernels through a (M, n_heads, n_ctx) buffer of scores (any number of rows):
//   scores    one block per (row, head); each warp takes every 4th key and computes q.k with a
//             warp-sum (kernels/cuda/common.cuh)
//   softmax   one block per (row, head) over its scores (pos + 1, or the window's)
//   weighted  one block per (row, head); thread d sums p_t v_t[d] over the keys
// Every score makes a round trip through global memory, and the three launches serialise.
//
// online_softmax, flash-decoding: the keys of each (row, head) are split into chunks of kSplitKeys
// positions, one block per chunk, so even a single sequence fills the GPU. Each block runs the
// online softmax of kernels/cuda/attention_common.cuh over its chunk (4 warps, combined in
// shared memory) and writes a partial state (max, sum, weighted sum); a second kernel combines
// the chunks' partials. The number of chunks depends only on n_ctx, never on the position, so a
// decode step can be captured once in a CUDA Graph and replayed at every position (chunks past a
// row's position write an empty state).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/ref/attention.h"

namespace minfer::cuda {

constexpr int64_t kSplitKeys = 256;

using AttentionArgs = minfer::AttentionArgs;  // kernels/ref/attention.h

// Floats of scratch each variant needs.
int64_t attention_scores_floats(int64_t M, int64_t n_heads, int64_t n_ctx);
int64_t flash_decode_floats(int64_t M, int64_t n_heads, int64_t head_dim, int64_t n_ctx);

void attention_three_pass(cudaStream_t stream, const AttentionArgs& a, float* scores);
void attention_flash_decode(cudaStream_t stream, const AttentionArgs& a, float* partials);

}  // namespace minfer::cuda
