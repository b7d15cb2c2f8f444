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

// out (N, K) f16 = the weights of quantized blocks of any type (core/quants_blocks.h): each value
// is the f32 dequantization, exact as on the host, rounded to f16 once, as in llama.cpp's
// dequantize-to-f16 path for cuBLAS. One thread per group of 8 weights.
void dequantize_rows(cudaStream_t stream,
                     __half* out,                   // (N, K), dense
                     const void* w, DType w_dtype,  // (N, K / block) blocks of a quantized type
                     int64_t N, int64_t K);

}  // namespace minfer::cuda
