// Matrix products with Q8_0 weights (core/dtype.h: blocks of 32 int8 and an f16 scale).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/threads.h"

namespace minfer::cpu {

// out = x * w^T with w in Q8_0 (see kernels/ref/matmul.h); K a multiple of 32.
void matmul_q8_0(ThreadPool& pool,
                 float* out, int64_t ld_out,   // (M, N)
                 const float* x, int64_t ld_x, // (M, K)
                 const BlockQ8* w,             // (N, K / 32) blocks, dense
                 int64_t M, int64_t N, int64_t K);

}  // namespace minfer::cpu
