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
// online_softmax, flash-decoding: the keys each (row, head) sees are split n_splits ways, one
// block per chunk, so even a single sequence fills the GPU. Each block runs the online softmax of
// kernels/cuda/attention_common.cuh over its chunk (4 warps, combined in shared memory) and
// writes a partial state (max, sum, weighted sum); a second kernel combines the chunks' partials
// (with one split the block writes the output, and there is no second kernel).
// note: n_splits is chosen on the host from the rows, heads and SMs (flash_decode_splits,
// engine/cuda_choices.h), never from the positions, which live on the device; each row divides
// its own keys into n_splits chunks (flash_chunk_keys, launch_limits.h), so a short row leaves its
// last splits empty and a long one gets long chunks. A decode step captured once in a CUDA Graph
// thus replays correctly at every later position.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/ref/attention.h"

namespace minfer::cuda {

using AttentionArgs = minfer::AttentionArgs;  // kernels/ref/attention.h

// Floats of scratch each variant needs.
int64_t attention_scores_floats(int64_t M, int64_t n_heads, int64_t n_ctx);
int64_t flash_decode_floats(int64_t M, int64_t n_heads, int64_t head_dim, int64_t n_splits);  // 0 for one split

void attention_three_pass(cudaStream_t stream, const AttentionArgs& a, float* scores);
// skip_prompt_tiles: leave the rows of one-prompt tiles (tile_is_one_prompt,
// attention_common.cuh) to attention_prefill_tiles, in the same step.
void attention_flash_decode(cudaStream_t stream, const AttentionArgs& a, int64_t n_splits, bool skip_prompt_tiles,
                            float* partials);  // (M, n_heads, n_splits, head_dim + 2); unused for one split

}  // namespace minfer::cuda
