// ggml's quantized blocks, as GGUF files hold them: the legacy types of 32 weights (Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0) and the K-quants of 256 (Q2_K .. Q6_K).
//
// A legacy block is one scale d (f16) for 32 weights, and for the _1 types a minimum m:
//   Q4_0  w = d * (q - 8),   q in 0..15        18 bytes / 32 = 4.5 bits per weight
//   Q4_1  w = d * q + m,     q in 0..15        20 bytes       5.0
//   Q5_0  w = d * (q - 16),  q in 0..31        22 bytes       5.5  (4 low bits in qs, the 5th in qh)
//   Q5_1  w = d * q + m,     q in 0..31        24 bytes       6.0
//   Q8_0  w = d * q,         q in -128..127    34 bytes       8.5
// A K-quant "super-block" of 256 weights has one f16 scale d (and one dmin) and sub-blocks of 16
// or 32 weights, each with a small integer scale (and min) of its own, so the scales cost fewer
// bits per weight while still following the weights closely:
//   Q2_K  16 x 16 weights, 4-bit scale and min:  w = d * sc * q - dmin * m,  q in 0..3    2.625 bits
//   Q3_K  16 x 16, 6-bit signed scales:          w = d * (sc - 32) * q,      q in -4..3   3.4375
//   Q4_K   8 x 32, 6-bit scale and min:          w = d * sc * q - dmin * m,  q in 0..15   4.5
//   Q5_K   8 x 32, 6-bit scale and min:          the same,                   q in 0..31   5.5
//   Q6_K  16 x 16, 8-bit signed scales:          w = d * sc * (q - 32),      q in 0..63   6.5625
// The comments on each struct say where each bit of q lives; the layouts are ggml's, byte for byte.
//
// Dequantization is bit-identical to the `gguf` Python package's (gguf-py/gguf/quants.py), which
// computes in float32 in the order written above: (d * sc) * q - (dmin * m). Quantization exists
// for the legacy types, bit for bit as the gguf package's quantize (and llama.cpp's
// quantize_row_*_ref, but for the sign of a zero scale); K-quants are read only
// (tests/test_quants.cpp holds both to fixtures the package made). The per-block arithmetic is in
// core/quants_blocks.h, shared with the CUDA kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/host_device.h"

namespace minfer {

constexpr int kQK = 256;  // weights per K-quant super-block

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];  // weight j < 16 in the low nibble of qs[j], weight j + 16 in its high nibble
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];  // as Q4_0
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];   // bit j (little-endian over the 4 bytes): the 5th bit of weight j
  uint8_t qs[16];  // low 4 bits, as Q4_0
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ2_K {
  uint8_t scales[16];  // sub-block i (weights 16i ..): scale in the low nibble, min in the high
  uint8_t qs[64];      // weight 128h + 32s + l: bits 2s, 2s+1 of qs[32h + l]
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[32];   // weight 32b + l: the high bit is bit b of hmask[l]; q = low - (bit ? 0 : 4)
  uint8_t qs[64];      // low 2 bits, as Q2_K
  uint8_t scales[12];  // 16 6-bit scales: low 4 bits in nibbles of bytes 0..7, high 2 in bytes 8..11
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];  // 8 6-bit scales and 8 6-bit mins (unpacked by k_scale_min)
  uint8_t qs[128];     // sub-block 2c + h (weights 32(2c+h) + l): nibble h of qs[32c + l]
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];      // weight 32j + l: its 5th bit is bit j of qh[l]
  uint8_t qs[128];     // low 4 bits, as Q4_K
};
struct BlockQ6_K {
  uint8_t ql[128];     // weight 128h + 64s + k: nibble s of ql[64h + k]
  uint8_t qh[64];      // weight 128h + 32s + l: bits 2s, 2s+1 of qh[32h + l] are its top 2 bits
  int8_t scales[16];   // one per 16 weights
  uint16_t d;
};
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
                  sizeof(BlockQ5_1) == 24,
              "legacy blocks are ggml's sizes");
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
                  sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210,
              "K-quant blocks are ggml's sizes");

// Where a block of type t holds its f16 scales: d first, then its minimum (m, or dmin) if it
// has one. count is 0 for the types that are not blocks.
struct ScaleOffsets {
  int count;
  size_t at[2];
};
constexpr ScaleOffsets scale_offsets(DType t) {
  switch (t) {
    case DType::q8_0: case DType::q4_0: case DType::q5_0: return {1, {0, 0}};
    case DType::q4_1: case DType::q5_1: return {2, {0, 2}};
    case DType::q2_k: return {2, {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)}};
    case DType::q3_k: return {1, {offsetof(BlockQ3_K, d), 0}};
    case DType::q4_k: return {2, {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)}};
    case DType::q5_k: return {2, {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)}};
    case DType::q6_k: return {1, {offsetof(BlockQ6_K, d), 0}};
    default: return {0, {0, 0}};
  }
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K or Q5_K block.
MINFER_HOST_DEVICE inline void k_scale_min(const uint8_t* scales, int j, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
    *m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}
// The signed scale (-32..31) of sub-block i (0..15) of a Q3_K block.
MINFER_HOST_DEVICE inline int q3_k_scale(const uint8_t* scales, int i) {
  const int low = (i < 8 ? scales[i] : scales[i - 8] >> 4) & 0xF;
  const int high = (scales[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// n weights of a quantized type to f32 (n whole blocks; t any quantized type).
void dequantize_row(DType t, float* dst, const void* src, size_t n);
// n weights to blocks of q4_0, q4_1, q5_0, q5_1 or q8_0 (n whole blocks of 32).
void quantize_row(DType t, void* dst, const float* src, size_t n);

// llama.cpp's quantize_row_q8_0 (n a multiple of 32).
void quantize_q8_0(BlockQ8* dst, const float* src, size_t n);

}  // namespace minfer
