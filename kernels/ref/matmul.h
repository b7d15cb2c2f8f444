#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace minfer::ref {

// out = x * w^T: out[m, n] = sum_k x[m, k] * w[n, k]. Weights are stored as llama2.c stores them,
// one output feature per row ([N, K], "out by in"), in f32, f16, bf16 or a quantized type (GGUF's
// blocks along each row, dequantized a row at a time: the definition of the quantized products).
void matmul(float* out, int64_t ld_out,      // (M, N)
            const float* x, int64_t ld_x,    // (M, K)
            const void* w, DType w_dtype,    // (N, K), dense
            int64_t M, int64_t N, int64_t K);

}  // namespace minfer::ref
