// Quantized weights to f32 (kernels/cpu/quant/dequantize.h), 32 codes at a time: each block's codes are
// unpacked with byte operations into 32 signed bytes (kernels/cpu/quant/quant_unpack.h), widened to f32
// and written as y = dl * q - ml.
//
// Bit-identical to dequantize_row (core/quants.cpp): dl is the same float product as the
// reference's, and dl * q is exact in float32 for every type (core/quants_blocks.h counts the
// bits), so the one subtraction is the only rounding and a compiler that fuses it with the
// multiply could not change a result either. tests/isa/test_quant_dot.cpp compares the bytes.
//
// A build without AVX2 keeps the reference.
#include "kernels/cpu/quant/dequantize.h"

#include <cstdint>

#include "core/error.h"
#include "core/quants.h"
#include "core/quants_blocks.h"
#include "kernels/cpu/quant/quant_unpack.h"

namespace minfer::cpu {

namespace {

#if defined(__AVX2__)

using unpack::Affine;

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

template <class Block>
void blocks_f32(float* dst, const void* src, size_t n) {
  const auto* b = static_cast<const Block*>(src);
  float* y = dst;
  auto emit = [&](__m256i q, Affine a0, Affine a1) {
    emit16(_mm256_castsi256_si128(q), a0, y);
    emit16(_mm256_extracti128_si256(q, 1), a1, y + 16);
    y += 32;
  };
  for (size_t i = 0; i < n / size_t(blocks::Traits<Block>::kWeights); ++i) unpack::codes(b[i], emit);
}

// Returns false for the plain types.
bool dequantize_simd(DType t, float* dst, const void* src, size_t n) {
  return blocks::dispatch_block(t, [&](auto tag) { blocks_f32<typename decltype(tag)::type>(dst, src, n); });
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
