// Activations from f32 to f16 or bf16, the input format of the Tensor Core products, and Q8_0
// weights to f16 for them.
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

// out (N, K) f16 = d * q of each block: the product is exact in f32 (11 significant bits times
// 7) and rounds to f16 once, as in llama.cpp's dequantize-to-f16 path for cuBLAS.
void dequantize_q8_0_rows(cudaStream_t stream,
                          __half* out,       // (N, K), dense
                          const BlockQ8* w,  // (N, K / 32) blocks
                          int64_t N, int64_t K);

}  // namespace minfer::cuda
