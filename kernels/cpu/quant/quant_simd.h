// The SIMD pieces the quantized dot products share (kernels/cpu/quant/quant_dot*.cpp): an f16 scale
// to f32, a byte dot product, and a horizontal sum.
#pragma once

#include <cstdint>

#include "core/dtype.h"

#if defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif

namespace minfer::cpu::qsimd {

inline float f16(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return f16_to_f32(h);
#endif
}

#if defined(__AVX2__)
// The 32 products of unsigned bytes u and signed bytes s, summed in pairs to int16 (no overflow
// while u * s stays within +-16383 per pair, true for u <= 127 or |s| <= 63) and in fours to int32.
inline __m256i dot_u8_i8_i32(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}
// The same products as 8 float partial sums.
inline __m256 dot_i8_abs(__m256i u, __m256i s) { return _mm256_cvtepi32_ps(dot_u8_i8_i32(u, s)); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

}  // namespace minfer::cpu::qsimd
