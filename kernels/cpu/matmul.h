#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/threads.h"

namespace minfer::cpu {

// Up to this many rows of activations (decode of a batch of sequences), a hand-written kernel
// streams the weight rows once, split across the threads, and multiplies each small tile of them
// with every activation row while it sits in registers and L1, widening f16/bf16 in registers.
// At one row memory bandwidth is the limit; at a few dozen the FMA units are, and the kernel
// still beats a GEMM that must first pack the weights. Above it, Eigen's cache-blocked GEMM runs
// on each thread's slice of the weights (prefill), except for f32 products whose activations
// fit in L2 (M x K up to 256 x 1024), where the outer-product kernel of batched decode is faster
// (see matmul.cpp).
constexpr int64_t kSmallMaxRows = 32;

// out = x * w^T (see kernels/ref/matmul.h); w in f32, bf16 or f16.
void matmul(ThreadPool& pool,
            float* out, int64_t ld_out,      // (M, N)
            const float* x, int64_t ld_x,    // (M, K)
            const void* w, DType w_dtype,    // (N, K), dense
            int64_t M, int64_t N, int64_t K);

}  // namespace minfer::cpu
