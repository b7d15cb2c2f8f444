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
  sgemm,               // cuBLAS, f32 weights
  lt_gemm,             // cuBLASLt on Tensor Cores, f16 or bf16 weights (activations rounded to them)
  dequantize_lt_gemm,  // quantized weights dequantized to f16 a slab at a time, then cuBLASLt
  naive, tiled, mma,   // the hand-written GEMMs of --gemm, for every M (kernels/cuda/gemm_*.cu)
};
// --gemm cublas: matvec up to kMatvecMaxRows rows, then by the weights' type. --gemm naive, tiled
// or mma: that kernel for every M. Error naming the fix where no kernel takes the weights:
// quantized weights on a hand-written GEMM, or mma (f16 on Tensor Cores) with other than f16.
CudaProduct cuda_product(GemmKind gemm, int64_t M, DType w);

// The online softmax takes flash-decoding (parallel over rows, heads and chunks of keys) up to
// this many rows and the prefill kernel (tiles of 64 rows) above.
constexpr int64_t kDecodeAttentionRows = 64;

enum class CudaAttention { three_pass, flash_decode, prefill };
// three_pass: its three kernels at any M. online_softmax: flash_decode or prefill, by M.
CudaAttention cuda_attention(AttentionAlgorithm algorithm, int64_t M);

}  // namespace minfer
