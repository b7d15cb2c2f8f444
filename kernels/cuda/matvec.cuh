// The decode product: out (M, N) = x (M, K) * w (N, K)^T for a handful of rows M.
//
// With M rows each weight is used M times: at M = 1 the product reads every weight once and does
// 2 FLOPs with it, so HBM bandwidth decides its speed and a GEMM library's tiling only adds
// overhead. One warp owns one weight row: each of its 32 lanes reads 8 consecutive weights a step
// (one 16-byte load of f16 or bf16, two of f32), so a step of the warp reads 256 consecutive
// weights (512 contiguous bytes of f16, 1 KiB of f32), multiplies them with
// all M activation rows (which stay in L1/L2), and a warp sum gives M outputs. Eight warps per
// block and enough blocks keep tens of kilobytes of loads in flight per SM, which is what it
// takes to approach peak bandwidth. Weights may be f32, f16, bf16 or any quantized type (blocks
// dequantized in registers, core/quants_blocks.h), activations are f32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/launch_limits.h"  // kMatvecMaxRows, the most rows matvec takes

namespace minfer::cuda {

void matvec(cudaStream_t stream,
            float* out, int64_t ld_out,    // (M, N)
            const float* x, int64_t ld_x,  // (M, K)
            const void* w, DType w_dtype,  // (N, K), dense; quantized: (N, K / block) blocks
            int64_t M, int64_t N, int64_t K);

}  // namespace minfer::cuda
