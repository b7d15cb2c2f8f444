#pragma once

#include <cstdint>

#include "engine/dtype.h"
#include "engine/threads.h"

namespace minfer::cpu {

// Up to this many rows of activations, a product is a matrix-vector product per row: the weight
// rows are split across the threads, read once, and each row of weights is multiplied with every
// activation row while it sits in registers. Memory bandwidth is the limit there, so a hand-written
// kernel that streams the weights (widening f16/bf16 in registers) beats a GEMM that packs them.
// Above it, Eigen's cache-blocked GEMM (compute-bound) runs on each thread's slice of the weights.
constexpr int64_t kGemvMaxRows = 4;

// out = x * w^T (see kernels/ref/matmul.h); w in f32, bf16 or f16.
void matmul(ThreadPool& pool,
            float* out, int64_t ld_out,      // (M, N)
            const float* x, int64_t ld_x,    // (M, K)
            const void* w, DType w_dtype,    // (N, K), dense
            int64_t M, int64_t N, int64_t K);

}  // namespace minfer::cpu
