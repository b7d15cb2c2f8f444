// Dot products of quantized weight rows with quantized activations: the inner loop of decode
// with GGUF weights (kernels/cpu/quant/matmul_quant.cpp runs it over a matrix).
//
// The activations are quantized once per product, in the block type llama.cpp's CPU backend pairs
// with each weight type, so that a weight block and an activation block meet in integer
// multiply-adds and are scaled once per block:
//   weights q8_0, q4_0, q5_0   activations ActQ8_0: 32 int8 and a scale d
//                                 sum w*x = dw * dx * sum(qw * qx)
//   weights q4_1, q5_1         activations ActQ8_1: also s = d * sum(q), for the weights' minimum
//                                 sum w*x = dw * dx * sum(qw * qx) + mw * sx
//   weights q2_k .. q6_k       activations ActQ8_K: 256 int8, a scale d and the sums of each 16,
//                                 so the minimums' term of a sub-block is dmin * m * dx * bsum
// note: an f32 scale where llama.cpp stores an f16 one (Q8_0, Q8_1): one rounding fewer, and the
// integer sums are the same.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/quants.h"

namespace minfer::cpu {

struct ActQ8_0 {
  float d;
  int8_t q[32];
};
struct ActQ8_1 {
  float d;
  float s;  // d * sum(q)
  int8_t q[32];
};
struct ActQ8_K {
  float d;
  int8_t q[kQK];
  int16_t bsums[16];  // sum of q[16i .. 16i + 15]
};
// Four ActQ8_0 blocks as decode's Q4_0 dot product reads them on AVX-512 with VBMI and VNNI, and
// on AVX2 (quant_dot_legacy.cpp): one 512-bit register (two 256-bit ones) holds the 16 code bytes
// of four weight blocks, so its low nibbles meet `low` and its high nibbles `high`, and each
// block's 4 int32 lanes meet `d` and `offset` lane by lane. A row's last group is padded with zeros.
struct ActQ8_0x4 {
  int8_t low[64];      // q[0 .. 15] of block i at 16i
  int8_t high[64];     // q[16 .. 31] of block i at 16i
  float d[16];         // d of block i in lanes 4i .. 4i + 3
  int32_t offset[16];  // -2 * sum(q) of block i in lanes 4i .. 4i + 3: the codes' -8, over 4 lanes
};
// Whether Q4_0's decode reads ActQ8_0x4: decided where that kernel is compiled
// (quant_dot_legacy.cpp: AVX-512 VBMI and VNNI, or AVX2), so that the quantizer writes what it reads.
bool q4_0_dot_reads_groups();

// Calls fn(blocks, weights per block) with one row of activations quantized for weights of type
// w, as the block struct it holds: ActQ8_K (K-quants), ActQ8_1 (q4_1, q5_1) or ActQ8_0.
template <class Fn>
void with_act_blocks(DType w, const uint8_t* row, Fn&& fn) {
  if (is_k_quant(w))
    fn(reinterpret_cast<const ActQ8_K*>(row), kQK);
  else if (w == DType::q4_1 || w == DType::q5_1)
    fn(reinterpret_cast<const ActQ8_1*>(row), 32);
  else
    fn(reinterpret_cast<const ActQ8_0*>(row), 32);
}

// Bytes of the activations of one row of K inputs quantized for weights of type w.
size_t act_row_bytes(DType w, int64_t K);
// Quantizes one row of K activations (K whole weight blocks) for weights of type w into dst.
void quantize_activations(DType w, void* dst, const float* x, int64_t K);
// The three activation quantizers (n whole blocks of 32, 32 and 256). Q8_0/Q8_1: d = max|x| / 127,
// q = x / d rounded to nearest even; Q8_K: llama.cpp's quantize_row_q8_K (d = -max / 127 with the
// sign of the largest magnitude, q capped at 127).
void quantize_act_q8_0(ActQ8_0* dst, const float* x, int64_t n);
void quantize_act_q8_1(ActQ8_1* dst, const float* x, int64_t n);
void quantize_act_q8_k(ActQ8_K* dst, const float* x, int64_t n);
// The same rounding as quantize_act_q8_0, laid out in groups of four blocks: ceil(n / 128) groups.
void quantize_act_q8_0x4(ActQ8_0x4* dst, const float* x, int64_t n);

// The activations decode's dot products (dot_rows_for) read: the blocks above, except ActQ8_0x4
// for Q4_0 where q4_0_dot_reads_groups(). Bytes of one row of K, and the quantizer that writes it.
size_t dot_act_row_bytes(DType w, int64_t K);
void quantize_dot_activations(DType w, void* dst, const float* x, int64_t K);

// out[r * ld_out] = dot(w_row, activation row r) for r < rows (1 <= rows <= 4): one weight row of
// nb blocks against `rows` activation rows as quantize_dot_activations wrote them, the first at act
// and each act_stride bytes after the last. Reading the weight row once for up to four activation
// rows is what batched decode gains.
using DotRows = void (*)(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride,
                         int rows, int64_t nb);
DotRows dot_rows_for(DType w);

// One per weight type (quant_dot.cpp: q8_0; quant_dot_legacy.cpp: q4_0 .. q5_1; quant_dot_k.cpp:
// q2_k .. q6_k), each with AVX-512, AVX2 and scalar paths chosen at compile time.
void dot_rows_q8_0(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb);
void dot_rows_q4_0(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb);
void dot_rows_q4_1(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb);
void dot_rows_q5_0(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb);
void dot_rows_q5_1(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb);
void dot_rows_q2_k(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb);
void dot_rows_q3_k(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb);
void dot_rows_q4_k(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb);
void dot_rows_q5_k(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb);
void dot_rows_q6_k(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb);

// The instruction set the dot products were compiled for: "AVX-512", "AVX2" or "scalar".
const char* quant_dot_isa();

}  // namespace minfer::cpu
