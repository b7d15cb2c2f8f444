// The Tensor Core matrix product, for study: f16 inputs, f32 accumulation, through the WMMA API
// (warp-wide 16 x 16 x 16 multiply-accumulates, `wmma.mma.sync` in PTX, HMMA instructions in
// SASS). A block of 4 warps computes a 64 x 64 tile of out; for each 32-wide slice of K it stages
// 64 activation rows and 64 weight rows in shared memory, and each warp multiplies its 32 x 32
// quarter of the tile as 2 x 2 fragments. Activations are converted to f16 first, scaled so that
// none overflows (`cast_rows_f16_scaled`), and out is multiplied by its alpha; weights must be f16. Compared with gemm_tiled the arithmetic moves from CUDA cores (2 FLOPs per
// FMA per thread) to Tensor Cores (a 16 x 16 x 16 product per warp instruction: 4096 multiply-adds,
// 8192 FLOPs).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace minfer::cuda {

void gemm_mma(cudaStream_t stream,
              float* out, int64_t ld_out,    // (M, N)
              const __half* x16,             // (M, K), dense f16
              const __half* w,               // (N, K), dense f16
              const float* alpha,            // (1), device: out = alpha * x16 w^T
              int64_t M, int64_t N, int64_t K);

}  // namespace minfer::cuda
