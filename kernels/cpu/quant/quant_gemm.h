// Prefill and batched decode with quantized weights in integer arithmetic (AVX-512 VNNI, or AVX2): the
// product of M rows of activations, already quantized for the weight type
// (kernels/cpu/quant/quant_dot.h), with N weight rows.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/threads.h"

namespace minfer::cpu {

// Whether this build multiplies weights of type w with quant_gemm: AVX-512 VNNI and a quantized w,
// or AVX2 and a quantized w other than Q8_0 (whose unsigned codes would saturate vpmaddubsw).
bool quant_gemm_supports(DType w);

// The fewest activation rows from which quant_gemm is faster than decode's dot products for weights
// of type w on this build's ISA, as measured (quant_gemm.cpp): from 5 (Q4_1) to 33 (Q2_K and Q3_K
// with AVX2, whose dot products stayed as fast through 32 rows). Only meaningful where
// quant_gemm_supports(w).
int64_t quant_gemm_min_rows(DType w);

// out = x * w^T, where x's rows are given quantized: act holds M rows of act_row_bytes(w, K) bytes
// each, as quantize_activations wrote them. Allocates nothing once its buffers have grown.
void quant_gemm(ThreadPool& pool,
                float* out, int64_t ld_out,   // (M, N)
                const uint8_t* act,           // (M, act_row_bytes(w_dtype, K)) bytes
                const void* w, DType w_dtype, // (N, K / block) blocks, dense
                int64_t M, int64_t N, int64_t K);

}  // namespace minfer::cpu
