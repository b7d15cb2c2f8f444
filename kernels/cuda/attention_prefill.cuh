// Causal attention for prefill on Tensor Cores: many query rows, typically consecutive positions
// of a sequence, with an f16 or bf16 cache and heads of 64 or 128.
//
// Each block takes one tile of 64 consecutive rows and one head. When the tile's rows are
// consecutive positions of one sequence (tile_is_one_prompt, attention_common.cuh: what prefill
// produces, except at a sequence boundary), the block runs a flash-attention loop on Tensor Cores
// (WMMA, 16x16x16 tiles, f32 accumulation): Q (64 x d) stays in shared memory, and for each tile
// of 64 keys S = Q K^T is one Tensor Core product, the causal mask and the online softmax update
// run row by row (a warp per 16 rows), and O += P V is another product. The scores never leave
// the chip. Any other tile (a mixed serving step's decode rows, a prompt's first or last rows
// beside them) is left alone: the backend runs flash-decoding over the same step, which skips the
// one-prompt tiles (attention_flash_decode's skip_prompt_tiles), so every row is attended once.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/attention_decode.cuh"

namespace minfer::cuda {

void attention_prefill_tiles(cudaStream_t stream, const AttentionArgs& a);

}  // namespace minfer::cuda
