#pragma once

#include <cstdint>

#include "core/threads.h"

namespace minfer::cpu {

// out = rmsnorm(x) * weight, each of a row's `groups` runs of D on its own (see
// kernels/ref/rmsnorm.h).
void rmsnorm(ThreadPool& pool,
             float* out, int64_t ld_out,    // (M, groups * D)
             const float* x, int64_t ld_x,  // (M, groups * D)
             const float* weight,           // (D)
             int64_t M, int64_t D, float eps, int64_t groups = 1);

// Fused with the residual add before it: x += delta; out = rmsnorm(x) * weight. One pass over x
// instead of two; equal to add() then rmsnorm().
void residual_rmsnorm(ThreadPool& pool,
                      float* out, int64_t ld_out,          // (M, D)
                      float* x, int64_t ld_x,              // (M, D), updated in place
                      const float* delta, int64_t ld_delta,  // (M, D)
                      const float* weight,                 // (D)
                      int64_t M, int64_t D, float eps);

}  // namespace minfer::cpu
