// The products of kernels/cpu/matmul.cpp's table other than one_row (the plain one, which stays
// there with the table and the dispatch), each tuned for the shapes it takes. All compute
// out (M, N) = x (M, K) times w (N, K) transposed, as kernels/ref/matmul.h defines it, with w in
// f32, f16 or bf16 unless said otherwise.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/threads.h"

#if defined(__AVX2__) && defined(__FMA__)
#define MINFER_PANELS 1  // prefill takes the panels instead of Eigen (matmul.cpp's table)
#endif

namespace minfer::cpu {

// The most activation rows small_m and outer take, for any K (matmul.cpp's table).
constexpr int64_t kSmallMaxRows = 32;

// Register tiles of 4 weight rows x up to 4 activation rows, every weight read once (2-32 rows).
void small_m(ThreadPool& pool,
             float* out, int64_t ld_out,    // (M, N)
             const float* x, int64_t ld_x,  // (M, K)
             const void* w, DType w_dtype,  // (N, K), dense
             int64_t M, int64_t N, int64_t K);

// Outer products of f32 weights broadcast from memory with the activations packed transposed
// (batched decode: 8 to 32 rows).
void outer(ThreadPool& pool,
           float* out, int64_t ld_out,    // (M, N)
           const float* x, int64_t ld_x,  // (M, K)
           const float* w,                // (N, K), dense
           int64_t M, int64_t N, int64_t K);

#if defined(MINFER_PANELS)
// Prefill with AVX2 or AVX-512: panels of two vectors of weight rows (16 or 32) packed transposed
// (widened to f32), register tiles of 6 (AVX2) or 8 (AVX-512) activation rows.
void panels(ThreadPool& pool,
            float* out, int64_t ld_out,    // (M, N)
            const float* x, int64_t ld_x,  // (M, K)
            const void* w, DType w_dtype,  // (N, K), dense
            int64_t M, int64_t N, int64_t K);
#endif

// Eigen's blocked GEMM on each thread's slice of the weights (f16/bf16 widened 64 rows at a time).
void gemm(ThreadPool& pool,
          float* out, int64_t ld_out,    // (M, N)
          const float* x, int64_t ld_x,  // (M, K)
          const void* w, DType w_dtype,  // (N, K), dense
          int64_t M, int64_t N, int64_t K);

// bf16 weights, each activation row as one_row would take it but with the weights split into even
// and odd halves a load at a time; a thread's 16 weight rows stay in cache while the rows pass.
void one_row_bf16_blocks(ThreadPool& pool,
                         float* out, int64_t ld_out,    // (M, N)
                         const float* x, int64_t ld_x,  // (M, K)
                         const uint16_t* w,             // (N, K), dense
                         int64_t M, int64_t N, int64_t K);

}  // namespace minfer::cpu
