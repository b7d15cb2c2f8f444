// Quantized weights to f32 for the CPU GEMM path (kernels/cpu/quant/matmul_quant.cpp), bit for bit as
// core/quants.h's dequantize_row, with AVX-512 and AVX2 code for the types prefill meets.
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace minfer::cpu {

// n weights of quantized type t (n whole blocks) to f32; the same bits as dequantize_row.
void dequantize_f32(DType t, float* dst, const void* src, size_t n);

}  // namespace minfer::cpu
