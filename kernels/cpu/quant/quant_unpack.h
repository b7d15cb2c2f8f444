// The codes of every quantized block as 32 signed bytes at a time, with the affine map that turns
// them into weights: y = dl * q - ml, where dl is the scale of the code's sub-block (d, or d * sc)
// and ml what the reference subtracts (dmin * m for Q2_K, Q4_K and Q5_K, -m for Q4_1 and Q5_1,
// whose y = d * q + m is the same sum, and 0 for the symmetric types). The offsets of the
// symmetric types are already subtracted from the codes (Q4_0's q - 8, Q5_0's q - 16, Q3_K's
// q - 4, Q6_K's q - 32).
//
// Two consumers: dequantize.cpp writes the weights as f32 (prefill's dequantized tiles, which the
// f32 prefill kernel multiplies), and quant_gemm.cpp keeps the codes as bytes for integer products
// (prefill on AVX-512 VNNI, or AVX2 for every type but Q8_0). Each
// unpacker calls emit(q, a0, a1) once per 32 weights of a block, in order: q holds the 32 codes,
// a0 the affine map of the first 16 and a1 that of the last 16 (the same for every type whose
// sub-blocks are 32 long).
//
// dl is the same float product as the reference's (core/quants_blocks.h), and dl * q is exact in
// float32 for every type, so the f32 weights are bit for bit dequantize_row's.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/quants.h"
#include "kernels/cpu/quant/quant_simd.h"

#if defined(__AVX2__)

namespace minfer::cpu::unpack {

struct Affine {  // y = dl * q - ml
  float dl, ml;
};

inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256i low_nibbles(__m256i b) { return _mm256_and_si256(b, _mm256_set1_epi8(0xF)); }
inline __m256i high_nibbles(__m256i b) { return low_nibbles(_mm256_srli_epi16(b, 4)); }
// Bit `bit` of every byte of b, as 0 or 1.
inline __m256i bit_of(__m256i b, int bit) {
  return _mm256_and_si256(_mm256_srl_epi16(b, _mm_cvtsi32_si128(bit)), _mm256_set1_epi8(1));
}

// --- Legacy blocks of 32 ---

// The 32 codes of a legacy 4-bit block: weight j < 16 in the low nibble of qs[j], j + 16 high.
inline __m256i legacy_nibbles(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0xF);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), mask), _mm_and_si128(b, mask));
}
// 16 in byte j where bit j of the 4 bytes qh (little-endian) is set, else 0.
inline __m256i legacy_fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i byte_of = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                           2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), byte_of);
  const __m256i mask = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask);
  return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

template <class Emit>
inline void codes(const BlockQ8& b, Emit&& emit) {
  const Affine a{qsimd::f16(b.d), 0.0f};
  emit(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.q)), a, a);
}
template <class Emit>
inline void codes(const BlockQ4_0& b, Emit&& emit) {
  const Affine a{qsimd::f16(b.d), 0.0f};
  emit(_mm256_sub_epi8(legacy_nibbles(b.qs), _mm256_set1_epi8(8)), a, a);
}
template <class Emit>
inline void codes(const BlockQ4_1& b, Emit&& emit) {
  const Affine a{qsimd::f16(b.d), -qsimd::f16(b.m)};
  emit(legacy_nibbles(b.qs), a, a);
}
template <class Emit>
inline void codes(const BlockQ5_0& b, Emit&& emit) {
  const Affine a{qsimd::f16(b.d), 0.0f};
  const __m256i q = _mm256_or_si256(legacy_nibbles(b.qs), legacy_fifth_bits(b.qh));
  emit(_mm256_sub_epi8(q, _mm256_set1_epi8(16)), a, a);
}
template <class Emit>
inline void codes(const BlockQ5_1& b, Emit&& emit) {
  const Affine a{qsimd::f16(b.d), -qsimd::f16(b.m)};
  emit(_mm256_or_si256(legacy_nibbles(b.qs), legacy_fifth_bits(b.qh)), a, a);
}

// --- K-quant super-blocks of 256 ---

// Q2_K and Q3_K: weights 32k .. 32k + 31 (h = k / 4, s = k % 4) take bits 2s, 2s + 1 of
// qs[32h ..]; their sub-blocks of 16 are 2k and 2k + 1. Q2_K's scale byte holds the scale in its
// low nibble and the min in its high one; Q3_K's high bit of weight 32k + l is bit k of hmask[l],
// and q = low - 4 where it is clear.
inline __m256i k_low2_32(const uint8_t* qs, int k) {
  return _mm256_and_si256(_mm256_srl_epi16(load32(qs + 32 * (k / 4)), _mm_cvtsi32_si128(2 * (k % 4))),
                          _mm256_set1_epi8(3));
}
inline Affine q2_k_affine(uint8_t scale_min, float d, float dmin) {
  return {d * float(scale_min & 0xF), dmin * float(scale_min >> 4)};
}
template <class Emit>
inline void codes(const BlockQ2_K& b, Emit&& emit) {
  const float d = qsimd::f16(b.d), dmin = qsimd::f16(b.dmin);
  for (int k = 0; k < 8; ++k)
    emit(k_low2_32(b.qs, k), q2_k_affine(b.scales[2 * k], d, dmin), q2_k_affine(b.scales[2 * k + 1], d, dmin));
}
template <class Emit>
inline void codes(const BlockQ3_K& b, Emit&& emit) {
  const float d = qsimd::f16(b.d);
  const __m256i hmask = load32(b.hmask);
  for (int k = 0; k < 8; ++k) {
    const __m256i high = _mm256_slli_epi16(bit_of(hmask, k), 2);
    const __m256i q = _mm256_sub_epi8(_mm256_or_si256(k_low2_32(b.qs, k), high), _mm256_set1_epi8(4));
    emit(q, Affine{d * float(q3_k_scale(b.scales, 2 * k)), 0.0f}, Affine{d * float(q3_k_scale(b.scales, 2 * k + 1)), 0.0f});
  }
}

// Sub-block j of a Q4_K or Q5_K block: dl = d * sc, ml = dmin * m, as the reference multiplies.
inline Affine k_affine(const uint8_t* scales, int j, float d, float dmin) {
  uint8_t sc, m;
  k_scale_min(scales, j, &sc, &m);
  return {d * float(sc), dmin * float(m)};
}

// Q4_K and Q5_K: sub-blocks 2c and 2c + 1 are the low and high nibbles of qs[32c ..]; Q5_K's 5th
// bit of weight 32j + l is bit j of qh[l] (qh == nullptr for Q4_K).
template <class Emit>
inline void q45_k_codes(uint16_t dh, uint16_t dminh, const uint8_t* scales, const uint8_t* qs, const uint8_t* qh,
                        Emit&& emit) {
  const float d = qsimd::f16(dh), dmin = qsimd::f16(dminh);
  const __m256i high = qh != nullptr ? load32(qh) : _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i b = load32(qs + 32 * c);
    __m256i lo = low_nibbles(b), hi = high_nibbles(b);
    if (qh != nullptr) {
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(bit_of(high, 2 * c), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(bit_of(high, 2 * c + 1), 4));
    }
    const Affine a_lo = k_affine(scales, 2 * c, d, dmin), a_hi = k_affine(scales, 2 * c + 1, d, dmin);
    emit(lo, a_lo, a_lo);
    emit(hi, a_hi, a_hi);
  }
}
template <class Emit>
inline void codes(const BlockQ4_K& b, Emit&& emit) {
  q45_k_codes(b.d, b.dmin, b.scales, b.qs, nullptr, emit);
}
template <class Emit>
inline void codes(const BlockQ5_K& b, Emit&& emit) {
  q45_k_codes(b.d, b.dmin, b.scales, b.qs, b.qh, emit);
}

// Q6_K: weights 128h + 32s .. +31 take nibble s / 2 of ql[64h + 32 (s % 2) ..] and bits 2s, 2s+1
// of qh[32h ..]; their sub-blocks of 16 are 8h + 2s and 8h + 2s + 1.
template <class Emit>
inline void codes(const BlockQ6_K& b, Emit&& emit) {
  const float d = qsimd::f16(b.d);
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = load32(b.ql + 64 * h), ql1 = load32(b.ql + 64 * h + 32), qh = load32(b.qh + 32 * h);
    const __m256i low[4] = {low_nibbles(ql0), low_nibbles(ql1), high_nibbles(ql0), high_nibbles(ql1)};
    for (int s = 0; s < 4; ++s) {
      const __m256i top = _mm256_or_si256(bit_of(qh, 2 * s), _mm256_slli_epi16(bit_of(qh, 2 * s + 1), 1));
      const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low[s], _mm256_slli_epi16(top, 4)), _mm256_set1_epi8(32));
      const int sub = 8 * h + 2 * s;
      emit(q, Affine{d * float(b.scales[sub]), 0.0f}, Affine{d * float(b.scales[sub + 1]), 0.0f});
    }
  }
}

// The length of the runs of weights that share one affine map: 16 for Q2_K, Q3_K and Q6_K, 32 for
// the others.
inline int affine_run(DType t) { return t == DType::q2_k || t == DType::q3_k || t == DType::q6_k ? 16 : 32; }

}  // namespace minfer::cpu::unpack

#endif
