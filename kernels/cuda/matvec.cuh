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

// The expert product's multiplications, its rows grouped by expert (matmul_experts.cu groups
// them): for each expert e of used[0 .. *n_used), rows [first[e], first[e + 1]) of x times expert
// e's matrix into the same rows of out, by matvec's warps, in chunks of min(chunk_rows,
// kMatvecMaxRows) rows. A grid row per expert used: its matrix is read from memory once a step,
// and a chunk after the first re-reads it from cache (likely: the warp re-reads its own row at
// once; not measured). Graph-safe: first, used and n_used stay on the device; the host gives
// max_used, a bound on *n_used (the grid's rows; those past *n_used return at once), and
// chunk_rows, which only sets the chunk size.
void matvec_experts(cudaStream_t stream,
                    float* out, int64_t ld_out,    // (first[E], N), in expert order
                    const float* x, int64_t ld_x,  // (first[E], K), in expert order
                    const void* w, DType w_dtype,  // (E, N, K), dense
                    const int32_t* first,          // (E + 1), on the device: expert e's first row
                    const int32_t* used,           // (E), on the device: the experts with rows, ascending
                    const int32_t* n_used,         // (1), on the device: how many
                    int64_t chunk_rows, int64_t max_used, int64_t N, int64_t K);

}  // namespace minfer::cuda
