#pragma once

#include <cstdint>

namespace minfer::ref {

// out[m, :] = weight * x[m, :] / sqrt(mean(x[m, :]^2) + eps)   (Llama's RMSNorm, as in run.c)
void rmsnorm(float* out, int64_t ld_out,     // (M, D)
             const float* x, int64_t ld_x,   // (M, D)
             const float* weight,            // (D)
             int64_t M, int64_t D, float eps);

}  // namespace minfer::ref
