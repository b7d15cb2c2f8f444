#pragma once

#include <cstdint>

namespace minfer::ref {

// out[m, :] = weight * x[m, :] / sqrt(mean(x[m, :]^2) + eps)   (Llama's RMSNorm, as in run.c)
// With groups > 1, each row holds `groups` runs of D values, each normalised on its own with the
// same weight: Qwen3's RMSNorm of every head of q and k.
void rmsnorm(float* out, int64_t ld_out,     // (M, groups * D)
             const float* x, int64_t ld_x,   // (M, groups * D)
             const float* weight,            // (D)
             int64_t M, int64_t D, float eps, int64_t groups = 1);

}  // namespace minfer::ref
