// Prefill and batched decode with quantized weights in integer arithmetic (AVX-512 VNNI, or AVX2): the
// product of M rows of activations, already quantized for the weight type
// (kernels/cpu/quant/quant_dot.h), with N weight rows.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/threads.h"
#include "kernels/cpu/quant/act_runs.h"

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

// One strip of quant_gemm: up to kQuantStripCols weight columns unpacked, their codes as unsigned
// bytes (u = q + code_shift, or q) and each run's dl and ml (quant_gemm.cpp's top has the terms).
constexpr int kQuantStripCols = 32;
struct QuantStrip {
  uint8_t* codes;  // (K / 4, 32, 4): quad k / 4 of column c at (k / 4 * 32 + c) * 4; 64-byte aligned
  float* scale;    // (K / G, 32): dl; 64-byte aligned
  float* minimum;  // (K / G, 32): ml (the types with a minimum); 64-byte aligned
};

// quant_gemm's register tiles over one unpacked strip: out(m, c) for the M rows of a and the
// strip's columns c < n_cols, rows ld_out apart (columns past n_cols may be read, never written).
// The packed layout's prefill (packed.cpp's strip_rows) unpacks its groups into a strip and runs
// these, so a packed matrix and the file's give each element the same operations. With AVX2, not
// for Q8_0 (quant_gemm_supports).
void quant_strip_rows(DType w, const QuantStrip& strip, const Activations& a, int64_t M, int64_t K,
                      float* out, int64_t ld_out, int64_t n_cols);

}  // namespace minfer::cpu
