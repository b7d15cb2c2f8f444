// Quantized blocks to f32 and back (core/quants.h). Compiled with -ffp-contract=off: a fused
// multiply-add in x * id + 8.5 would round once where the gguf package rounds twice, and moves
// codes at ties (tests/test_quants.cpp has such blocks). Dequantization is exact either way: an f16
// scale times a small integer fits float32's 24 bits.
#include "core/quants.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace minfer {

namespace {

// The low and high nibbles of 16 bytes: weights j and j + 16 of a legacy 4-bit block.
inline int low_nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }
// The 5th bit of weight j of a Q5 block.
inline int fifth_bit(const uint8_t* qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }

void dequantize_q4_0(float* y, const BlockQ4_0& b) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < 32; ++j) y[j] = d * float(low_nibble(b.qs, j) - 8);
}
void dequantize_q4_1(float* y, const BlockQ4_1& b) {
  const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
  for (int j = 0; j < 32; ++j) y[j] = d * float(low_nibble(b.qs, j)) + m;
}
void dequantize_q5_0(float* y, const BlockQ5_0& b) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < 32; ++j) y[j] = d * float((low_nibble(b.qs, j) | (fifth_bit(b.qh, j) << 4)) - 16);
}
void dequantize_q5_1(float* y, const BlockQ5_1& b) {
  const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
  for (int j = 0; j < 32; ++j) y[j] = d * float(low_nibble(b.qs, j) | (fifth_bit(b.qh, j) << 4)) + m;
}
void dequantize_q8_0_block(float* y, const BlockQ8& b) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < 32; ++j) y[j] = float(b.q[j]) * d;
}

void dequantize_q2_k(float* y, const BlockQ2_K& b) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int e = 0; e < kQK; ++e) {
    const int h = e / 128, s = (e / 32) % 4, l = e % 32;
    const uint8_t sc = b.scales[e / 16];
    const float dl = d * float(sc & 0xF), ml = dmin * float(sc >> 4);
    y[e] = dl * float((b.qs[32 * h + l] >> (2 * s)) & 3) - ml;
  }
}
void dequantize_q3_k(float* y, const BlockQ3_K& b) {
  const float d = f16_to_f32(b.d);
  for (int e = 0; e < kQK; ++e) {
    const int h = e / 128, s = (e / 32) % 4, l = e % 32;
    const int low = (b.qs[32 * h + l] >> (2 * s)) & 3;
    const int high = (b.hmask[l] >> (e / 32)) & 1;
    const float dl = d * float(q3_k_scale(b.scales, e / 16));
    y[e] = dl * float(low - (high ? 0 : 4));
  }
}
// Q4_K and Q5_K: sub-block j of 32 weights, 4 low bits from qs, the 5th (Q5_K) from qh.
template <typename Block>
void dequantize_q45_k(float* y, const Block& b, const uint8_t* qh) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k_scale_min(b.scales, j, &sc, &m);
    const float dl = d * float(sc), ml = dmin * float(m);
    for (int l = 0; l < 32; ++l) {
      int q = (b.qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
      if (qh != nullptr) q |= ((qh[l] >> j) & 1) << 4;
      y[32 * j + l] = dl * float(q) - ml;
    }
  }
}
void dequantize_q6_k(float* y, const BlockQ6_K& b) {
  const float d = f16_to_f32(b.d);
  for (int e = 0; e < kQK; ++e) {
    const int h = e / 128, r = e % 128;
    const int low = (b.ql[64 * h + r % 64] >> (4 * (r / 64))) & 0xF;
    const int high = (b.qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
    const float dl = d * float(b.scales[e / 16]);
    y[e] = dl * float((low | (high << 4)) - 32);
  }
}

template <typename Block, typename F>
void each_block(float* y, const void* src, size_t n, size_t block, F dequantize) {
  const auto* b = static_cast<const Block*>(src);
  for (size_t i = 0; i < n / block; ++i) dequantize(y + i * block, b[i]);
}

// The value of largest magnitude (the first of them), as the legacy symmetric types scale by it.
// note: starting from x[0], as the gguf package's argmax does, a block of zeros led by -0.0 gets
// the scale +0.0 (-0.0 / -8); llama.cpp starts from +0.0 and stores -0.0 there. Same weights.
float signed_absmax(const float* x, int n) {
  float amax = std::fabs(x[0]), max = x[0];
  for (int j = 1; j < n; ++j)
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  return max;
}

// The 4- or 5-bit codes of one legacy block: trunc(x * id + offset) capped at top (llama.cpp's
// (int8_t) cast and MIN; x * id + offset is never negative).
void codes(uint8_t* q, const float* x, float sub, float id, float offset, int top) {
  for (int j = 0; j < 32; ++j) {
    const float v = (x[j] - sub) * id + offset;
    q[j] = static_cast<uint8_t>(std::min(top, static_cast<int>(v)));
  }
}
void pack_nibbles(uint8_t* qs, const uint8_t* q) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
}
void pack_fifth_bits(uint8_t* qh, const uint8_t* q) {
  for (int i = 0; i < 4; ++i) {
    uint8_t byte = 0;
    for (int k = 0; k < 8; ++k) byte = static_cast<uint8_t>(byte | (((q[8 * i + k] >> 4) & 1) << k));
    qh[i] = byte;
  }
}

// Q4_0 / Q5_0: d = max / -(2^(bits-1)), the extreme weight at code 0.
template <typename Block>
void quantize_symmetric(Block* dst, const float* src, size_t n, int bits) {
  const float half = float(1 << (bits - 1));
  for (size_t i = 0; i < n / 32; ++i) {
    const float* x = src + i * 32;
    const float d = signed_absmax(x, 32) / -half;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t q[32];
    codes(q, x, 0.0f, id, half + 0.5f, (1 << bits) - 1);
    Block& b = dst[i];
    b.d = f32_to_f16(d);
    pack_nibbles(b.qs, q);
    if constexpr (sizeof(Block) == sizeof(BlockQ5_0)) pack_fifth_bits(b.qh, q);
  }
}
// Q4_1 / Q5_1: d = (max - min) / (2^bits - 1), m = min.
template <typename Block>
void quantize_affine(Block* dst, const float* src, size_t n, int bits) {
  const int top = (1 << bits) - 1;
  for (size_t i = 0; i < n / 32; ++i) {
    const float* x = src + i * 32;
    const float lo = *std::min_element(x, x + 32), hi = *std::max_element(x, x + 32);
    const float d = (hi - lo) / float(top);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t q[32];
    codes(q, x, lo, id, 0.5f, top);
    Block& b = dst[i];
    b.d = f32_to_f16(d);
    b.m = f32_to_f16(lo);
    pack_nibbles(b.qs, q);
    if constexpr (sizeof(Block) == sizeof(BlockQ5_1)) pack_fifth_bits(b.qh, q);
  }
}

}  // namespace

void quantize_q8_0(BlockQ8* dst, const float* src, size_t n) {
  for (size_t b = 0; b < n / 32; ++b) {
    const float* x = src + b * 32;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = f32_to_f16(d);
    for (int j = 0; j < 32; ++j) dst[b].q[j] = static_cast<int8_t>(std::roundf(x[j] * id));
  }
}

void dequantize_q8_0(float* dst, const BlockQ8* src, size_t n) { each_block<BlockQ8>(dst, src, n, 32, dequantize_q8_0_block); }

void dequantize_row(DType t, float* dst, const void* src, size_t n) {
  const size_t block = size_t(dtype_block(t));
  MINFER_CHECK(is_quantized(t), "dequantize_row: ", dtype_name(t), " is not a quantized type");
  MINFER_CHECK(n % block == 0, dtype_name(t), ": ", n, " elements are not whole blocks of ", block);
  switch (t) {
    case DType::q8_0: return dequantize_q8_0(dst, static_cast<const BlockQ8*>(src), n);
    case DType::q4_0: return each_block<BlockQ4_0>(dst, src, n, block, dequantize_q4_0);
    case DType::q4_1: return each_block<BlockQ4_1>(dst, src, n, block, dequantize_q4_1);
    case DType::q5_0: return each_block<BlockQ5_0>(dst, src, n, block, dequantize_q5_0);
    case DType::q5_1: return each_block<BlockQ5_1>(dst, src, n, block, dequantize_q5_1);
    case DType::q2_k: return each_block<BlockQ2_K>(dst, src, n, block, dequantize_q2_k);
    case DType::q3_k: return each_block<BlockQ3_K>(dst, src, n, block, dequantize_q3_k);
    case DType::q4_k:
      return each_block<BlockQ4_K>(dst, src, n, block, [](float* y, const BlockQ4_K& b) { dequantize_q45_k(y, b, nullptr); });
    case DType::q5_k:
      return each_block<BlockQ5_K>(dst, src, n, block, [](float* y, const BlockQ5_K& b) { dequantize_q45_k(y, b, b.qh); });
    case DType::q6_k: return each_block<BlockQ6_K>(dst, src, n, block, dequantize_q6_k);
    default: break;
  }
}

void quantize_row(DType t, void* dst, const float* src, size_t n) {
  MINFER_CHECK(n % 32 == 0, dtype_name(t), ": ", n, " elements are not whole blocks of 32");
  switch (t) {
    case DType::q8_0: return quantize_q8_0(static_cast<BlockQ8*>(dst), src, n);
    case DType::q4_0: return quantize_symmetric(static_cast<BlockQ4_0*>(dst), src, n, 4);
    case DType::q5_0: return quantize_symmetric(static_cast<BlockQ5_0*>(dst), src, n, 5);
    case DType::q4_1: return quantize_affine(static_cast<BlockQ4_1*>(dst), src, n, 4);
    case DType::q5_1: return quantize_affine(static_cast<BlockQ5_1*>(dst), src, n, 5);
    default: fail("cannot quantize to ", dtype_name(t), " (minfer makes q8_0, q4_0, q4_1, q5_0 and q5_1)");
  }
}

}  // namespace minfer
