// Matrix products with quantized weights (core/quants.h: q8_0, q4_0 .. q5_1, q2_k .. q6_k).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/threads.h"

namespace minfer::cpu {

// out = x * w^T with w in a quantized type (see kernels/ref/matmul.h); K whole blocks of w's type.
// batch_invariant: every M takes decode's dot products (matmul.h says why).
void matmul_quant(ThreadPool& pool,
                  float* out, int64_t ld_out,   // (M, N)
                  const float* x, int64_t ld_x, // (M, K)
                  const void* w, DType w_dtype, // (N, K / block) blocks, dense
                  int64_t M, int64_t N, int64_t K, bool batch_invariant = false);

}  // namespace minfer::cpu
