// RMSNorm, out = weight * x / sqrt(mean(x^2) + eps), and its fused variant that first adds the
// residual (x += delta, written back) in the same pass.
// One block per row (per run of D, where a row holds `groups` runs normalised apart: Qwen3's
// heads): every thread accumulates squares over a strided slice of the run, the block reduces
// with warp shuffles (kernels/cuda/common.cuh), then every thread scales its slice.
// The fused variant is the same kernel with a compile-time flag (kResidual); the op harness
// checks it equals add() followed by rmsnorm().
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace minfer::cuda {

void rmsnorm(cudaStream_t stream,
             float* out, int64_t ld_out,    // (M, groups * D)
             const float* x, int64_t ld_x,  // (M, groups * D)
             const float* weight,           // (D)
             int64_t M, int64_t D, float eps, int64_t groups = 1);

void residual_rmsnorm(cudaStream_t stream,
                      float* out, int64_t ld_out,            // (M, D)
                      float* x, int64_t ld_x,                // (M, D), += delta
                      const float* delta, int64_t ld_delta,  // (M, D)
                      const float* weight,                   // (D)
                      int64_t M, int64_t D, float eps);

}  // namespace minfer::cuda
