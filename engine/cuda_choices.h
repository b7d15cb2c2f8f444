// The choices the CUDA backend (engine/backend_cuda.cu) makes on the host before it launches a
// product or an attention kernel, as plain functions, so that they are tested on a machine
// without a GPU (tests/test_cuda_choices.cpp). The KV cache's default type is the decoder's
// choice (default_kv_dtype, engine/decoder.h), and recorded CUDA Graphs' bookkeeping is
// engine/recordings.h.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "engine/backend.h"

namespace minfer {

// Which kernel multiplies M activation rows by weights of type w.
enum class CudaProduct {
  matvec,              // up to kMatvecMaxRows rows (kernels/cuda/matvec.cuh), any weight type
  quant_rows,          // quantized weights, kMatvecMaxRows + 1 to kQuantRowsMaxRows rows: tiles
                       // dequantized in shared memory, each weight read once, K split among
                       // blocks (quant_rows_splits; gemm_quant_rows.cuh)
  sgemm,               // cuBLAS, f32 weights
  lt_gemm,             // cuBLASLt on Tensor Cores, f16 or bf16 weights (activations rounded to them)
  dequantize_lt_gemm,  // quantized weights dequantized to f16 a slab at a time, then cuBLASLt
  naive, tiled, mma,   // the hand-written GEMMs of --gemm, for every M (kernels/cuda/gemm_*.cu)
};
// --gemm cublas: matvec up to kMatvecMaxRows rows, quantized weights quant_rows up to
// kQuantRowsMaxRows, then by the weights' type. --gemm naive, tiled or mma: that kernel for every
// M. Error naming the fix where no kernel takes the weights: quantized weights on a hand-written
// GEMM, or mma (f16 on Tensor Cores) with other than f16.
CudaProduct cuda_product(GemmKind gemm, int64_t M, DType w);

// gemm_quant_rows's split of K (kernels/cuda/gemm_quant_rows.cuh): an (N / 64) x k_splits grid
// of blocks, enough to give every SM kQuantRowsBlocksPerSm (a matrix of 4096 rows is 64 tiles, half
// an H100), never splits of fewer than kQuantRowsMinSplitSlices slices of 32, at least 1. The
// splits' partial sums are added in split order by a second kernel, so a product's result depends
// on N, K and the GPU, never on M or on timing.
constexpr int64_t kQuantRowsBlocksPerSm = 4;
int64_t quant_rows_splits(int64_t N, int64_t K, int64_t sm_count);

// The online softmax takes flash-decoding (parallel over rows, heads and chunks of keys) for
// every row up to this many rows; above it the prefill kernel's Tensor Core tiles where they apply.
constexpr int64_t kDecodeAttentionRows = 64;

enum class CudaAttention {
  three_pass,     // its three kernels, every row
  flash_decode,   // flash-decoding, every row
  prefill_tiles,  // the prefill kernel's Tensor Core tiles of 64 rows that are one prompt's
                  // consecutive positions, and flash-decoding for the step's other rows (a mixed
                  // serving step's decode rows), in two launches that skip each other's rows
};
// three_pass: its three kernels at any M. online_softmax: prefill_tiles above
// kDecodeAttentionRows rows when the tiles run on Tensor Cores (an f16 or bf16 cache, heads of 64
// or 128: attention_prefill_on_tensor_cores), otherwise flash_decode.
CudaAttention cuda_attention(AttentionAlgorithm algorithm, int64_t M, DType cache_dtype, int64_t head_dim);
bool attention_prefill_on_tensor_cores(DType cache_dtype, int64_t head_dim);

// Flash-decoding's blocks: enough to give every SM this many (a block is 4 warps).
constexpr int64_t kFlashBlocksPerSm = 8;

// The splits flash-decoding launches per (row, head), for row_heads = M * n_heads of them on a GPU
// of sm_count SMs, when no row sees more than max_keys keys: enough blocks to fill the GPU
// (kFlashBlocksPerSm per SM), never more than max_keys needs at kFlashMinChunkKeys a chunk, at
// least 1. Rows divide their own keys among the splits on the device (flash_chunk_keys,
// kernels/cuda/launch_limits.h), so the count depends on no position and a CUDA Graph recorded
// with it replays correctly at every later position. max_keys is the block table's capacity
// (KvBlockTable::positions): the longest any row of the step may be, at this and every replay.
int64_t flash_decode_splits(int64_t row_heads, int64_t max_keys, int64_t sm_count);

}  // namespace minfer
