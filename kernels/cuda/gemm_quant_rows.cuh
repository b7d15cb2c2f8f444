// The product of a few rows with quantized weights: out (M, N) = x (M, K) * w (N, K)^T for
// kMatvecMaxRows + 1 to kQuantRowsMaxRows rows (9 to 64: batched decode, a mixed serving step, a
// short prompt), any quantized type (core/quants_blocks.h), f32 activations and arithmetic.
//
// Why: past matvec's 8 rows the backend used to dequantize the whole matrix to f16 at every call
// and hand it to cuBLASLt, which writes and reads 2 bytes per weight where the matrix holds 0.56
// (Q4_K): about 8x a matvec's bytes for a product that reads each weight once. Here a block owns
// 64 weight rows and every activation row (a tile of 16, 32 or 64, the smallest that holds M); for
// each slice of 32 of K it dequantizes its 64 x 32 weights into shared memory (a thread per group
// of 8, exactly as the host does, blocks::dequantize8) and stages the activations beside them, and
// each of its 16 x 16 threads accumulates a (tile / 16) x 4 patch of out, as gemm_tiled does. Each
// weight is read from memory once for all M rows, and no activation is rounded to a 16-bit type.
// note: a matrix of 4096 rows is only 64 such tiles, half the SMs of an H100, each looping over
// all of K; so K is split k_splits ways among blocks (quant_rows_splits, engine/cuda_choices.h),
// each writing its partial sums, which a second kernel adds in split order (deterministic).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/launch_limits.h"  // kQuantRowsMaxRows

namespace minfer::cuda {

// Floats of scratch the partials of k_splits splits need (0 for one).
int64_t gemm_quant_rows_floats(int64_t M, int64_t N, int64_t k_splits);

void gemm_quant_rows(cudaStream_t stream,
                     float* out, int64_t ld_out,    // (M, N)
                     const float* x, int64_t ld_x,  // (M, K)
                     const void* w, DType w_dtype,  // (N, K / block) blocks of a quantized type
                     int64_t M, int64_t N, int64_t K,
                     int64_t k_splits,              // of K among blocks, whole slices of 32
                     float* partials);              // (k_splits, M, N); unused for one split

}  // namespace minfer::cuda
