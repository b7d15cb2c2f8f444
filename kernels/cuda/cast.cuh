// Activations from f32 to f16 or bf16, the input format of the Tensor Core products, and quantized
// weights (Q8_0, Q4_0 .. Q6_K) to f16 for them.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace minfer::cuda {

void cast_rows(cudaStream_t stream,
               void* out, DType out_dtype,    // (M, K), dense
               const float* x, int64_t ld_x,  // (M, K)
               int64_t M, int64_t K);

// f16 activations that cannot overflow: out = x * s in f16, s the power of two (1 unless some |x|
// exceeds f16's 65504: Gemma-like activations reach 1e5) that brings every value within range,
// and alpha_beta = {1 / s, 0} on the device, for a product with f16 inputs to take as its alpha
// and beta (cuBLASLt's CUBLASLT_POINTER_MODE_DEVICE, gemm_mma's alpha) so that out comes unscaled.
// Why: cuBLASLt and gemm_mma take f16 activations beside f16 weights, and an activation past
// 65504 became inf and every output of its row NaN. Everything stays on the device (a recorded
// CUDA Graph replays it for new activations), and x is read a second time only when it overflows.
void cast_rows_f16_scaled(cudaStream_t stream,
                          __half* out,                   // (M, K), dense
                          const float* x, int64_t ld_x,  // (M, K)
                          int64_t M, int64_t K,
                          float* alpha_beta,             // (2), device
                          unsigned* absmax_bits);        // (1), device scratch

// out (N, K) f16 = the weights of quantized blocks of any type (core/quants_blocks.h): each value
// is the f32 dequantization, exact as on the host, rounded to f16 once, as in llama.cpp's
// dequantize-to-f16 path for cuBLAS. One thread per group of 8 weights.
void dequantize_rows(cudaStream_t stream,
                     __half* out,                   // (N, K), dense
                     const void* w, DType w_dtype,  // (N, K / block) blocks of a quantized type
                     int64_t N, int64_t K);

}  // namespace minfer::cuda
