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

// The expert product one slot at a time (kernels/ref/matmul_experts.h, without weights): out's
// row s = x's row s (x_per_slot) or s / k, times the matrix of expert ids[s], read by the same
// warps as matvec's one-row product. Graph-safe: the ids stay on the device, and an id outside
// [0, E) leaves its row unwritten. note: each slot reads its expert's matrix, so a batch whose rows share
// an expert reads it once per row, in decode and prefill alike; nothing on CUDA groups rows by
// expert yet (the CPU's cpu::matmul_experts does).
void matvec_experts(cudaStream_t stream,
                    float* out, int64_t ld_out,                    // (slots, N)
                    const float* x, int64_t ld_x, bool x_per_slot,  // (slots, K), or (slots / k, K)
                    const void* w, DType w_dtype,                  // (E, N, K), dense
                    const int32_t* ids,                            // (slots), each in [0, E)
                    int64_t slots, int64_t k, int64_t E, int64_t N, int64_t K);

}  // namespace minfer::cuda
