// Causal attention for prefill: many query rows, typically consecutive positions of a sequence.
//
// Each block takes 64 consecutive rows and one head. When those rows are consecutive positions
// of one sequence (what prefill produces, except at a sequence boundary) and the cache is f16 or
// bf16 with head_dim 64 or 128, the block runs a flash-attention loop on Tensor Cores (WMMA,
// 16x16x16 tiles, f32 accumulation): Q (64 x d) stays in shared memory, and for each tile of 64
// keys S = Q K^T is one Tensor Core product, the causal mask and the online softmax update run
// row by row (a warp per 16 rows), and O += P V is another product. The scores never leave the
// chip. Otherwise (mixed rows, an f32 cache, other head sizes) each warp attends one row with the
// exact f32 online softmax of kernels/cuda/attention_common.cuh.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/attention_decode.cuh"

namespace minfer::cuda {

void attention_prefill(cudaStream_t stream, const AttentionArgs& a);

}  // namespace minfer::cuda
