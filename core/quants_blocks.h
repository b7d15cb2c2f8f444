// The per-block arithmetic of core/quants.h's types, one copy for the host and the CUDA kernels:
// core/quants.cpp runs it on the host (dequantize_row, quantize_row) and kernels/cuda/ on the
// device (matvec, dequantize to f16, embedding, fill).
//
// Every block is dequantized in groups of 8 consecutive weights (group g: weights 8g .. 8g+7, 4
// groups in a legacy block, 32 in a K-quant super-block), and the 8 weights of a group always
// share one scale (and min), so a CUDA lane can own one group: dequantize8 reads only the bytes
// its group needs. A whole block is its groups in order.
//
// Bit-identical on both sides. Dequantization: every product is exact in float32 (an f16 scale
// has 11 significant bits; times a 4- to 8-bit sub-block scale and a code of at most 6 bits the
// product has at most 11 + 7 + 5 = 23 in Q6_K, 11 + 6 + 5 = 22 in Q5_K, fewer elsewhere; f16
// subnormals are at least 2^-24, far above float32's), so only the one addition or subtraction
// rounds and a fused multiply-add could not change a result either. Still, on the device every
// operation goes through the _rn intrinsics, which nvcc never fuses, and on the host the only
// caller, core/quants.cpp, is compiled with -ffp-contract=off. Quantization is not exact
// ((x - min) * id + offset rounds twice, as the gguf package does), so there this matters: a
// host file other than core/quants.cpp must not call these functions (the functions have internal
// linkage, so such a copy could not replace core/quants.cpp's at link time either).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/host_device.h"
#include "core/quants.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace minfer::blocks {

// The block struct of each quantized type and its weights per block.
template <class Block> struct Traits;
template <> struct Traits<BlockQ8> { static constexpr int kWeights = 32; };
template <> struct Traits<BlockQ4_0> { static constexpr int kWeights = 32; };
template <> struct Traits<BlockQ4_1> { static constexpr int kWeights = 32; };
template <> struct Traits<BlockQ5_0> { static constexpr int kWeights = 32; };
template <> struct Traits<BlockQ5_1> { static constexpr int kWeights = 32; };
template <> struct Traits<BlockQ2_K> { static constexpr int kWeights = kQK; };
template <> struct Traits<BlockQ3_K> { static constexpr int kWeights = kQK; };
template <> struct Traits<BlockQ4_K> { static constexpr int kWeights = kQK; };
template <> struct Traits<BlockQ5_K> { static constexpr int kWeights = kQK; };
template <> struct Traits<BlockQ6_K> { static constexpr int kWeights = kQK; };

template <class Block> struct Tag { using type = Block; };

// Calls fn(Tag<Block>{}) with the block struct of quantized type t; returns false for a plain type.
template <class Fn>
bool dispatch_block(DType t, Fn&& fn) {
  switch (t) {
    case DType::q8_0: fn(Tag<BlockQ8>{}); return true;
    case DType::q4_0: fn(Tag<BlockQ4_0>{}); return true;
    case DType::q4_1: fn(Tag<BlockQ4_1>{}); return true;
    case DType::q5_0: fn(Tag<BlockQ5_0>{}); return true;
    case DType::q5_1: fn(Tag<BlockQ5_1>{}); return true;
    case DType::q2_k: fn(Tag<BlockQ2_K>{}); return true;
    case DType::q3_k: fn(Tag<BlockQ3_K>{}); return true;
    case DType::q4_k: fn(Tag<BlockQ4_K>{}); return true;
    case DType::q5_k: fn(Tag<BlockQ5_K>{}); return true;
    case DType::q6_k: fn(Tag<BlockQ6_K>{}); return true;
    case DType::f32: case DType::f16: case DType::bf16: case DType::i32: break;
  }
  return false;
}

namespace {

// Float32 arithmetic rounded once per operation, never fused (see the top of the file).
MINFER_HOST_DEVICE inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
MINFER_HOST_DEVICE inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
MINFER_HOST_DEVICE inline float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
MINFER_HOST_DEVICE inline float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
MINFER_HOST_DEVICE inline float absf(float a) {
#if defined(__CUDA_ARCH__)
  return fabsf(a);
#else
  return std::fabs(a);
#endif
}
// f16 bits to float32 (exact) and back (round to nearest even).
MINFER_HOST_DEVICE inline float half_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return f16_to_f32(h);
#endif
}
MINFER_HOST_DEVICE inline uint16_t float_to_half(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#else
  return f32_to_f16(f);
#endif
}

// --- Dequantization: weights 8g .. 8g+7 of a block into y[0..7] ---

// Legacy 4-bit codes: weight j < 16 in the low nibble of qs[j], j + 16 in the high one, so group
// g takes bytes 8 (g % 2) .. +7, nibble g / 2.
MINFER_HOST_DEVICE inline int legacy_nibble(const uint8_t* qs, int g, int i) {
  return (qs[8 * (g % 2) + i] >> (4 * (g / 2))) & 0xF;
}
// The 5th bit of weight 8g + i: bit i of qh[g].
MINFER_HOST_DEVICE inline int legacy_fifth_bit(const uint8_t* qh, int g, int i) { return (qh[g] >> i) & 1; }

MINFER_HOST_DEVICE inline void dequantize8(const BlockQ8& b, int g, float* y) {
  const float d = half_to_float(b.d);
  for (int i = 0; i < 8; ++i) y[i] = mul_rn(float(b.q[8 * g + i]), d);
}
MINFER_HOST_DEVICE inline void dequantize8(const BlockQ4_0& b, int g, float* y) {
  const float d = half_to_float(b.d);
  for (int i = 0; i < 8; ++i) y[i] = mul_rn(d, float(legacy_nibble(b.qs, g, i) - 8));
}
MINFER_HOST_DEVICE inline void dequantize8(const BlockQ4_1& b, int g, float* y) {
  const float d = half_to_float(b.d), m = half_to_float(b.m);
  for (int i = 0; i < 8; ++i) y[i] = add_rn(mul_rn(d, float(legacy_nibble(b.qs, g, i))), m);
}
MINFER_HOST_DEVICE inline void dequantize8(const BlockQ5_0& b, int g, float* y) {
  const float d = half_to_float(b.d);
  for (int i = 0; i < 8; ++i)
    y[i] = mul_rn(d, float((legacy_nibble(b.qs, g, i) | (legacy_fifth_bit(b.qh, g, i) << 4)) - 16));
}
MINFER_HOST_DEVICE inline void dequantize8(const BlockQ5_1& b, int g, float* y) {
  const float d = half_to_float(b.d), m = half_to_float(b.m);
  for (int i = 0; i < 8; ++i)
    y[i] = add_rn(mul_rn(d, float(legacy_nibble(b.qs, g, i) | (legacy_fifth_bit(b.qh, g, i) << 4))), m);
}

// Q2_K and Q3_K's 2 low bits: weight e = 128h + 32s + l sits in bits 2s, 2s+1 of qs[32h + l]; for
// group g, h = g / 16, s = (g / 4) % 4 and l = 8 (g % 4) + i. Its sub-block of 16 is g / 2.
MINFER_HOST_DEVICE inline int k_low2(const uint8_t* qs, int g, int i) {
  return (qs[32 * (g / 16) + 8 * (g % 4) + i] >> (2 * ((g / 4) % 4))) & 3;
}

MINFER_HOST_DEVICE inline void dequantize8(const BlockQ2_K& b, int g, float* y) {
  const float d = half_to_float(b.d), dmin = half_to_float(b.dmin);
  const uint8_t sc = b.scales[g / 2];
  const float dl = mul_rn(d, float(sc & 0xF)), ml = mul_rn(dmin, float(sc >> 4));
  for (int i = 0; i < 8; ++i) y[i] = sub_rn(mul_rn(dl, float(k_low2(b.qs, g, i))), ml);
}
// The high bit of weight 32b + l is bit b of hmask[l] (b = g / 4); q = low - 4 where it is clear.
MINFER_HOST_DEVICE inline void dequantize8(const BlockQ3_K& b, int g, float* y) {
  const float d = half_to_float(b.d);
  const float dl = mul_rn(d, float(q3_k_scale(b.scales, g / 2)));
  for (int i = 0; i < 8; ++i) {
    const int high = (b.hmask[8 * (g % 4) + i] >> (g / 4)) & 1;
    y[i] = mul_rn(dl, float(k_low2(b.qs, g, i) - (high ? 0 : 4)));
  }
}
// Q4_K and Q5_K: sub-block j = g / 4 of 32; weight 32j + l (l = 8 (g % 4) + i) has its low 4 bits
// in nibble j % 2 of qs[32 (j / 2) + l] and (Q5_K) its 5th bit in bit j of qh[l].
MINFER_HOST_DEVICE inline void dequantize8_q45_k(const uint16_t dh, const uint16_t dminh, const uint8_t* scales,
                                                 const uint8_t* qs, const uint8_t* qh, int g, float* y) {
  const float d = half_to_float(dh), dmin = half_to_float(dminh);
  const int j = g / 4;
  uint8_t sc, m;
  k_scale_min(scales, j, &sc, &m);
  const float dl = mul_rn(d, float(sc)), ml = mul_rn(dmin, float(m));
  for (int i = 0; i < 8; ++i) {
    const int l = 8 * (g % 4) + i;
    int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
    if (qh != nullptr) q |= ((qh[l] >> j) & 1) << 4;
    y[i] = sub_rn(mul_rn(dl, float(q)), ml);
  }
}
MINFER_HOST_DEVICE inline void dequantize8(const BlockQ4_K& b, int g, float* y) {
  dequantize8_q45_k(b.d, b.dmin, b.scales, b.qs, nullptr, g, y);
}
MINFER_HOST_DEVICE inline void dequantize8(const BlockQ5_K& b, int g, float* y) {
  dequantize8_q45_k(b.d, b.dmin, b.scales, b.qs, b.qh, g, y);
}
// Q6_K: weight 128h + r (h = g / 16, r = 8 (g % 16) + i) has its low 4 bits in nibble r / 64 of
// ql[64h + r % 64] and its top 2 in bits 2 (r / 32), +1 of qh[32h + r % 32]; sub-block g / 2.
MINFER_HOST_DEVICE inline void dequantize8(const BlockQ6_K& b, int g, float* y) {
  const float d = half_to_float(b.d);
  const float dl = mul_rn(d, float(b.scales[g / 2]));
  const int h = g / 16, r0 = 8 * (g % 16);
  for (int i = 0; i < 8; ++i) {
    const int r = r0 + i;
    const int low = (b.ql[64 * h + r % 64] >> (4 * (r / 64))) & 0xF;
    const int high = (b.qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
    y[i] = mul_rn(dl, float((low | (high << 4)) - 32));
  }
}

// A whole block: its groups in order.
template <class Block>
MINFER_HOST_DEVICE inline void dequantize_block(const Block& b, float* y) {
  for (int g = 0; g < Traits<Block>::kWeights / 8; ++g) dequantize8(b, g, y + 8 * g);
}

// --- Quantization of one legacy 4- or 5-bit block of 32 weights, bit for bit as the gguf package ---

// The value of largest magnitude (the first of them), as the symmetric types scale by it.
// note: starting from x[0], as the gguf package's argmax does, a block of zeros led by -0.0 gets
// the scale +0.0 (-0.0 / -8); llama.cpp starts from +0.0 and stores -0.0 there. Same weights.
MINFER_HOST_DEVICE inline float signed_absmax(const float* x) {
  float amax = absf(x[0]), max = x[0];
  for (int j = 1; j < 32; ++j)
    if (amax < absf(x[j])) {
      amax = absf(x[j]);
      max = x[j];
    }
  return max;
}
// The codes trunc((x - sub) * id + offset) capped at top (llama.cpp's (int8_t) cast and MIN; the
// value is never negative), as nibbles in qs and (5-bit types, qh != nullptr) 5th bits in qh.
MINFER_HOST_DEVICE inline void pack_codes(uint8_t* qs, uint8_t* qh, const float* x, float sub_by, float id,
                                          float offset, int top) {
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) {
    const int c = static_cast<int>(add_rn(mul_rn(sub_rn(x[j], sub_by), id), offset));
    q[j] = static_cast<uint8_t>(c < top ? c : top);
  }
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
  if (qh == nullptr) return;
  for (int i = 0; i < 4; ++i) {
    uint8_t byte = 0;
    for (int k = 0; k < 8; ++k) byte = static_cast<uint8_t>(byte | (((q[8 * i + k] >> 4) & 1) << k));
    qh[i] = byte;
  }
}
// Q4_0 / Q5_0: d = max / -(2^(bits-1)), the extreme weight at code 0.
MINFER_HOST_DEVICE inline uint16_t quantize_symmetric(uint8_t* qs, uint8_t* qh, const float* x, int bits) {
  const float half = float(1 << (bits - 1));
  const float d = div_rn(signed_absmax(x), -half);
  const float id = d != 0.0f ? div_rn(1.0f, d) : 0.0f;
  pack_codes(qs, qh, x, 0.0f, id, half + 0.5f, (1 << bits) - 1);
  return float_to_half(d);
}
// Q4_1 / Q5_1: d = (max - min) / (2^bits - 1), m = min (the first of the smallest, the first of
// the largest, as std::min_element and std::max_element pick them).
MINFER_HOST_DEVICE inline void quantize_affine(uint16_t* dh, uint16_t* mh, uint8_t* qs, uint8_t* qh, const float* x,
                                               int bits) {
  const int top = (1 << bits) - 1;
  float lo = x[0], hi = x[0];
  for (int j = 1; j < 32; ++j) {
    if (x[j] < lo) lo = x[j];
    if (hi < x[j]) hi = x[j];
  }
  const float d = div_rn(sub_rn(hi, lo), float(top));
  const float id = d != 0.0f ? div_rn(1.0f, d) : 0.0f;
  pack_codes(qs, qh, x, lo, id, 0.5f, top);
  *dh = float_to_half(d);
  *mh = float_to_half(lo);
}

MINFER_HOST_DEVICE inline void quantize_block(BlockQ4_0& b, const float* x) { b.d = quantize_symmetric(b.qs, nullptr, x, 4); }
MINFER_HOST_DEVICE inline void quantize_block(BlockQ5_0& b, const float* x) { b.d = quantize_symmetric(b.qs, b.qh, x, 5); }
MINFER_HOST_DEVICE inline void quantize_block(BlockQ4_1& b, const float* x) { quantize_affine(&b.d, &b.m, b.qs, nullptr, x, 4); }
MINFER_HOST_DEVICE inline void quantize_block(BlockQ5_1& b, const float* x) { quantize_affine(&b.d, &b.m, b.qs, b.qh, x, 5); }

}  // namespace

}  // namespace minfer::blocks
