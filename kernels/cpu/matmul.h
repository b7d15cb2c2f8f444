#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/threads.h"

namespace minfer::cpu {

// out = x * w^T (see kernels/ref/matmul.h); w in f32, bf16, f16 or a quantized type in the file's
// layout (matmul_quant.h). The kernel is chosen by the number of rows M and the weights' type: the
// table atop matmul.cpp. So a row's rounding depends on how many rows come with it (f32: one_row
// for one row, small_m or outer for a few, the panels for prefill), unless batch_invariant: then
// every row is computed as a lone row is (one_row, or the quantized types' dot products), whatever
// M, and a token's logits do not depend on how a prompt was split into passes or how many sequences
// decode together, at the price of prefill speed. Quantized weights packed at load
// (quant/packed.h: matmul_packed, which the CPU backend calls instead) are invariant without it.
void matmul(ThreadPool& pool,
            float* out, int64_t ld_out,      // (M, N)
            const float* x, int64_t ld_x,    // (M, K)
            const void* w, DType w_dtype,    // (N, K), dense
            int64_t M, int64_t N, int64_t K, bool batch_invariant = false);

// The same product with f32 weights on the calling thread alone: the prefill panels with AVX2 or
// AVX-512, Eigen's GEMM without them. For callers that have split the work across the pool already
// (matmul_quant.cpp's dequantized tiles).
void matmul_f32_on_this_thread(float* out, int64_t ld_out,    // (M, N)
                               const float* x, int64_t ld_x,  // (M, K)
                               const float* w,                // (N, K), dense
                               int64_t M, int64_t N, int64_t K);

}  // namespace minfer::cpu
