// Quantized weights to f32 (kernels/cpu/dequantize.h), 32 codes at a time: each block's codes are
// unpacked with byte operations into 32 signed bytes (the offset already subtracted: q - 8, q - 32),
// widened to f32 and written as y = dl * q - ml, where dl is the scale of the code's sub-block
// (d, or d * sc) and ml what the reference subtracts (dmin * m for Q4_K and Q5_K, -m for Q4_1 and
// Q5_1, whose y = d * q + m is the same sum, and 0 for the symmetric types, as x - 0 is x).
//
// Bit-identical to dequantize_row (core/quants.cpp): dl is the same float product as the
// reference's, and dl * q is exact in float32 for every type (core/quants_blocks.h counts the
// bits), so the one subtraction is the only rounding and a compiler that fuses it with the
// multiply could not change a result either. tests/isa/test_quant_dot.cpp compares the bytes.
//
// Q2_K and Q3_K keep the reference, as does a build without AVX2.
#include "kernels/cpu/dequantize.h"

#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "core/quants.h"
#include "kernels/cpu/quant_simd.h"

namespace minfer::cpu {

namespace {

#if defined(__AVX2__)

using qsimd::f16;

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

// 16 signed byte codes to f32.
inline void emit16(__m128i q, Affine a, float* y) {
#if defined(__AVX512F__)
  const __m512 v = _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_maskz_cvtepi8_epi32(0xFFFF, q));
  _mm512_storeu_ps(y, _mm512_sub_ps(_mm512_mul_ps(v, _mm512_set1_ps(a.dl)), _mm512_set1_ps(a.ml)));
#else
  const __m256 dl = _mm256_set1_ps(a.dl), ml = _mm256_set1_ps(a.ml);
  const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
  const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)));
  _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(lo, dl), ml));
  _mm256_storeu_ps(y + 8, _mm256_sub_ps(_mm256_mul_ps(hi, dl), ml));
#endif
}
// 32 codes: the first 16 with a0, the last 16 with a1.
inline void emit32(__m256i q, Affine a0, Affine a1, float* y) {
  emit16(_mm256_castsi256_si128(q), a0, y);
  emit16(_mm256_extracti128_si256(q, 1), a1, y + 16);
}
inline void emit32(__m256i q, Affine a, float* y) { emit32(q, a, a, y); }

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

inline void block_f32(const BlockQ8& b, float* y) {
  emit32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.q)), {f16(b.d), 0.0f}, y);
}
inline void block_f32(const BlockQ4_0& b, float* y) {
  emit32(_mm256_sub_epi8(legacy_nibbles(b.qs), _mm256_set1_epi8(8)), {f16(b.d), 0.0f}, y);
}
inline void block_f32(const BlockQ4_1& b, float* y) { emit32(legacy_nibbles(b.qs), {f16(b.d), -f16(b.m)}, y); }
inline void block_f32(const BlockQ5_0& b, float* y) {
  const __m256i q = _mm256_or_si256(legacy_nibbles(b.qs), legacy_fifth_bits(b.qh));
  emit32(_mm256_sub_epi8(q, _mm256_set1_epi8(16)), {f16(b.d), 0.0f}, y);
}
inline void block_f32(const BlockQ5_1& b, float* y) {
  emit32(_mm256_or_si256(legacy_nibbles(b.qs), legacy_fifth_bits(b.qh)), {f16(b.d), -f16(b.m)}, y);
}

// --- K-quant super-blocks of 256 ---

// Sub-block j of a Q4_K or Q5_K block: dl = d * sc, ml = dmin * m, as the reference multiplies.
inline Affine k_affine(const uint8_t* scales, int j, float d, float dmin) {
  uint8_t sc, m;
  k_scale_min(scales, j, &sc, &m);
  return {d * float(sc), dmin * float(m)};
}

// Q4_K and Q5_K: sub-blocks 2c and 2c + 1 are the low and high nibbles of qs[32c ..]; Q5_K's 5th
// bit of weight 32j + l is bit j of qh[l] (qh == nullptr for Q4_K).
inline void q45_k_f32(uint16_t dh, uint16_t dminh, const uint8_t* scales, const uint8_t* qs, const uint8_t* qh,
                      float* y) {
  const float d = f16(dh), dmin = f16(dminh);
  const __m256i high = qh != nullptr ? load32(qh) : _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i b = load32(qs + 32 * c);
    __m256i lo = low_nibbles(b), hi = high_nibbles(b);
    if (qh != nullptr) {
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(bit_of(high, 2 * c), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(bit_of(high, 2 * c + 1), 4));
    }
    emit32(lo, k_affine(scales, 2 * c, d, dmin), y + 64 * c);
    emit32(hi, k_affine(scales, 2 * c + 1, d, dmin), y + 64 * c + 32);
  }
}
inline void block_f32(const BlockQ4_K& b, float* y) { q45_k_f32(b.d, b.dmin, b.scales, b.qs, nullptr, y); }
inline void block_f32(const BlockQ5_K& b, float* y) { q45_k_f32(b.d, b.dmin, b.scales, b.qs, b.qh, y); }

// Q6_K: weights 128h + 32s .. +31 take nibble s / 2 of ql[64h + 32 (s % 2) ..] and bits 2s, 2s+1
// of qh[32h ..]; their sub-blocks of 16 are 8h + 2s and 8h + 2s + 1.
inline void block_f32(const BlockQ6_K& b, float* y) {
  const float d = f16(b.d);
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = load32(b.ql + 64 * h), ql1 = load32(b.ql + 64 * h + 32), qh = load32(b.qh + 32 * h);
    const __m256i low[4] = {low_nibbles(ql0), low_nibbles(ql1), high_nibbles(ql0), high_nibbles(ql1)};
    for (int s = 0; s < 4; ++s) {
      const __m256i top = _mm256_or_si256(bit_of(qh, 2 * s), _mm256_slli_epi16(bit_of(qh, 2 * s + 1), 1));
      const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low[s], _mm256_slli_epi16(top, 4)), _mm256_set1_epi8(32));
      const int sub = 8 * h + 2 * s;
      emit32(q, {d * float(b.scales[sub]), 0.0f}, {d * float(b.scales[sub + 1]), 0.0f}, y + 128 * h + 32 * s);
    }
  }
}

template <class Block, int kWeights>
void blocks_f32(float* dst, const void* src, size_t n) {
  const auto* b = static_cast<const Block*>(src);
  for (size_t i = 0; i < n / kWeights; ++i) block_f32(b[i], dst + i * kWeights);
}

// Returns false for the types without vector code here.
bool dequantize_simd(DType t, float* dst, const void* src, size_t n) {
  switch (t) {
    case DType::q8_0: blocks_f32<BlockQ8, 32>(dst, src, n); return true;
    case DType::q4_0: blocks_f32<BlockQ4_0, 32>(dst, src, n); return true;
    case DType::q4_1: blocks_f32<BlockQ4_1, 32>(dst, src, n); return true;
    case DType::q5_0: blocks_f32<BlockQ5_0, 32>(dst, src, n); return true;
    case DType::q5_1: blocks_f32<BlockQ5_1, 32>(dst, src, n); return true;
    case DType::q4_k: blocks_f32<BlockQ4_K, kQK>(dst, src, n); return true;
    case DType::q5_k: blocks_f32<BlockQ5_K, kQK>(dst, src, n); return true;
    case DType::q6_k: blocks_f32<BlockQ6_K, kQK>(dst, src, n); return true;
    default: return false;
  }
}

#else

bool dequantize_simd(DType, float*, const void*, size_t) { return false; }

#endif

}  // namespace

void dequantize_f32(DType t, float* dst, const void* src, size_t n) {
  MINFER_CHECK(is_quantized(t), "dequantize_f32: ", dtype_name(t), " is not a quantized type");
  MINFER_CHECK(n % size_t(dtype_block(t)) == 0, dtype_name(t), ": ", n, " elements are not whole blocks of ",
               dtype_block(t));
  if (!dequantize_simd(t, dst, src, n)) dequantize_row(t, dst, src, n);
}

}  // namespace minfer::cpu
