// The K-quant dot products (kernels/cpu/quant/quant_dot.h): Q2_K .. Q6_K weights against ActQ8_K
// activations, one super-block of 256 at a time.
//
// Every K-quant weight is w = d * sc_i * (u - off) - dmin * m_i with u an unsigned code, sc_i and
// m_i small integers of its sub-block i, and off 4 (Q3_K), 32 (Q6_K) or 0. Against x = dx * q:
//   sum w*x = d * dx * sum_i sc_i * (sum_i(u * q) - off * bsum_i) - dmin * dx * sum_i m_i * bsum_i
// where bsum_i, the sum of the q of sub-block i, comes with the activations. So the weights' codes
// stay unsigned bytes (the left operand of vpmaddubsw), the offset and the minimums cost one
// multiply-add against the bsums per row, and each super-block adds two floats per lane.
//
// AVX2: a group of 32 codes (two sub-blocks of 16, or one of 32) is unpacked once per super-block
// for every activation row, multiplied with vpmaddubsw into int16 pairs (at most 2 * 63 * 127, no
// overflow) and with vpmaddwd by the sub-block scales into int32 (exact: a super-block sums to at
// most 256 * 63 * 127 * 128 < 2^31); with AVX-512 VNNI the second step and the sum are one
// vpdpwssd. AVX-512 (F, BW) does Q4_K, Q5_K and Q6_K 64 codes at a time (Q2_K and Q3_K keep the
// AVX2 code: they move the fewest bytes). The scales are unpacked in vector registers once per
// super-block; the int32 sums become floats once per super-block and row, and each row is summed
// across lanes once at the end. The scalar path decodes a super-block into signed codes and
// per-16 scales and mins, shared by the rows.
#include "kernels/cpu/quant/quant_dot.h"

#include <cstring>

#include "kernels/cpu/quant/quant_simd.h"

// The vector code below uses FMA and F16C beside AVX2 (every AVX2 CPU has both).
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define MINFER_K_SIMD 1
#endif

namespace minfer::cpu {

namespace {

template <typename Block>
inline void prefetch_ahead(const Block* b) {
  const char* p = reinterpret_cast<const char*>(b) + 4096;  // 4 KiB ahead (bench/results/NOTES.md)
  for (size_t o = 0; o < sizeof(Block); o += 64) __builtin_prefetch(p + o);
}

inline const ActQ8_K* act_row(const char* act, size_t stride, int m) {
  return reinterpret_cast<const ActQ8_K*>(act + size_t(m) * stride);
}

#if defined(MINFER_K_SIMD)

template <int MR>
struct Acts {  // the activation blocks of one super-block, one per row
  const ActQ8_K* x[MR];
  Acts(const char* act, size_t stride, int64_t b) {
    for (int m = 0; m < MR; ++m) x[m] = act_row(act, stride, m) + b;
  }
};

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// acc + the products of int16 p and s summed in pairs (one vpdpwssd with AVX-512 VNNI).
inline __m256i madd_acc(__m256i acc, __m256i p, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpwssd_epi32(acc, p, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
#endif
}

// sumi[m] += scale * (u * q) over the 32 codes u that meet activation bytes 32g .. 32g + 31.
template <int MR>
inline void group_dot(__m256i* sumi, const Acts<MR>& a, int g, __m256i u, __m256i scale) {
  for (int m = 0; m < MR; ++m) sumi[m] = madd_acc(sumi[m], _mm256_maddubs_epi16(u, load32(a.x[m]->q + 32 * g)), scale);
}

// sum_i v_i * bsum_i of row m, in 8 int32 lanes (v: 16 int16, one per sub-block of 16).
template <int MR>
inline __m256i bsum_dot(const Acts<MR>& a, int m, __m256i v) {
  return _mm256_madd_epi16(load32(a.x[m]->bsums), v);
}

// acc[m] += d * dx * sumi[m]
template <int MR>
inline void scale_rows(__m256* acc, const Acts<MR>& a, const __m256i* sumi, float d) {
  for (int m = 0; m < MR; ++m)
    acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(d * a.x[m]->d), _mm256_cvtepi32_ps(sumi[m]), acc[m]);
}
// The types with minimums (Q2_K, Q4_K, Q5_K):
//   acc[m] += d * dx * sumi[m]   and   macc[m] -= dmin * dx * sum_i m_i * bsum_i (mins16: m_i as 16 int16)
// note: one conversion for both f16 and a separate accumulator for the minimums (no chain of two
// FMAs per block). AVX2 on a Zen 2, one thread: Q4_K's product 1 x 768 x 2048 in cache 1.07x; decode
// of stories110M's shape, 4 interleaved rounds, Q4_K_M 1.03x, Q5_K_M 1.02x (bench/results/NOTES.md).
template <int MR>
inline void scale_and_mins_rows(__m256* acc, __m256* macc, const Acts<MR>& a, const __m256i* sumi,
                                uint16_t d, uint16_t dmin, __m256i mins16) {
  const uint32_t both = uint32_t(d) | uint32_t(dmin) << 16;
  int32_t bits;
  std::memcpy(&bits, &both, 4);
  const __m128 d_dmin = _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
  for (int m = 0; m < MR; ++m) {
    const __m128 scaled = _mm_mul_ps(d_dmin, _mm_broadcast_ss(&a.x[m]->d));  // d * dx, dmin * dx
    acc[m] = _mm256_fmadd_ps(_mm256_broadcastss_ps(scaled), _mm256_cvtepi32_ps(sumi[m]), acc[m]);
    macc[m] = _mm256_fnmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(scaled)), _mm256_cvtepi32_ps(bsum_dot(a, m, mins16)),
                               macc[m]);
  }
}
// sumi[m] -= off * sum_i sc_i * bsum_i, off = 2^shift.
template <int MR>
inline void offset_rows(__m256i* sumi, const Acts<MR>& a, __m256i sc16, int shift) {
  for (int m = 0; m < MR; ++m) sumi[m] = _mm256_sub_epi32(sumi[m], _mm256_slli_epi32(bsum_dot(a, m, sc16), shift));
}

template <int MR>
inline void store_rows(float* out, int64_t ld_out, const __m256* acc) {
  for (int m = 0; m < MR; ++m) out[m * ld_out] = qsimd::hsum(acc[m]);
}
template <int MR>
inline void store_rows(float* out, int64_t ld_out, const __m256* acc, const __m256* macc) {
  for (int m = 0; m < MR; ++m) out[m * ld_out] = qsimd::hsum(_mm256_add_ps(acc[m], macc[m]));
}

// Bits [j, j + width) of each byte of v, moved to bits [at, at + width).
inline __m256i bits_at(__m256i v, int j, int at, int width) {
  const __m256i moved = j >= at ? _mm256_srli_epi16(v, j - at) : _mm256_slli_epi16(v, at - j);
  return _mm256_and_si256(moved, _mm256_set1_epi8(static_cast<char>(((1 << width) - 1) << at)));
}
#if !(defined(__AVX512F__) && defined(__AVX512BW__))  // (used by the AVX2 code of Q4_K .. Q6_K only)
inline __m256i low_nibbles(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
#endif

// Q4_K / Q5_K: the scales (bytes 0..7) and mins (8..15) of k_scale_min from the 12 packed bytes
// (16 read; the block goes on).
inline __m128i scale_min_vec(const uint8_t* packed) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
  const __m128i w0212 = _mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)), _mm_setr_epi32(0, 0, 0, 4));
  const __m128i low = _mm_and_si128(w0212, _mm_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F));
  const __m128i w0011 = _mm_srli_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)), 2);
  return _mm_or_si128(low, _mm_and_si128(w0011, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030)));
}
// The 8 mins of scale_min_vec, each twice: the multipliers of the 16 bsums.
inline __m256i mins_twice(__m128i sm) {
  return _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15)));
}
#if !(defined(__AVX512F__) && defined(__AVX512BW__))
// Scale j of scale_min_vec (in both 128-bit halves of sm2) as 16 int16.
inline __m256i scale_of(__m256i sm2, int j) { return _mm256_shuffle_epi8(sm2, _mm256_set1_epi16(static_cast<short>(0x8000 | j))); }
#endif

// Q3_K: the 16 signed scales of q3_k_scale from the 12 packed bytes.
inline __m128i q3_scales_vec(const uint8_t* packed) {
  uint32_t top;
  std::memcpy(&top, packed + 8, 4);
  const __m128i v = _mm_insert_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed)), static_cast<int>(top), 2);
  const __m128i w0101 = _mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 1, 0)), _mm_setr_epi32(0, 0, 4, 4));
  const __m128i w2222 = _mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2)), _mm_setr_epi32(0, 2, 4, 6));
  const __m128i high = _mm_slli_epi32(_mm_and_si128(w2222, _mm_set1_epi8(3)), 4);
  return _mm_sub_epi8(_mm_or_si128(_mm_and_si128(w0101, _mm_set1_epi8(0x0F)), high), _mm_set1_epi8(32));
}

// 16 int8 scales of sub-blocks of 16 as int16, even sub-blocks in the low 128 bits and odd ones
// in the high, so that pair_scale picks those of a group with one shuffle.
inline __m256i split_scales(__m128i sc8) {
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15)));
}
// The multipliers of group g (sub-blocks 2g and 2g + 1 of 16): sc[2g] in the low 128 bits, sc[2g + 1] in the high.
inline __m256i pair_scale(__m256i split, int g) {
  return _mm256_shuffle_epi8(split, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * g)));
}

#if defined(__AVX512F__) && defined(__AVX512BW__)

inline __m512i madd_acc(__m512i acc, __m512i p, __m512i s) {
#if defined(__AVX512VNNI__)
  return _mm512_dpwssd_epi32(acc, p, s);
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(p, s));
#endif
}
// sumi[m] += scale * (u * q) over the 64 codes u that meet activation bytes off .. off + 63.
template <int MR>
inline void group_dot64(__m512i* sumi, const Acts<MR>& a, int off, __m512i u, __m512i scale) {
  for (int m = 0; m < MR; ++m) sumi[m] = madd_acc(sumi[m], _mm512_maddubs_epi16(u, _mm512_loadu_si512(a.x[m]->q + off)), scale);
}
template <int MR>
inline void fold(__m256i* sumi, const __m512i* wide) {
  for (int m = 0; m < MR; ++m) sumi[m] = _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xF, wide[m], 0), _mm512_maskz_extracti64x4_epi64(0xF, wide[m], 1));
}
// lo in every int16 of the low 256 bits, hi in the high.
inline __m512i halves16(int lo, int hi) {
  return _mm512_maskz_inserti64x4(0xFF, _mm512_set1_epi16(static_cast<short>(lo)), _mm256_set1_epi16(static_cast<short>(hi)), 1);
}
// v in both halves.
inline __m512i twice(__m256i v) { return _mm512_maskz_broadcast_i64x4(0xFF, v); }
inline __m512i twice32(const void* p) { return twice(load32(p)); }
// Word s + k of v in every int16 of 128-bit lane k.
inline __m512i quarter_scales(__m512i v, int s) {
  const __m512i lanes = _mm512_set_epi32(0x30003, 0x30003, 0x30003, 0x30003, 0x20002, 0x20002, 0x20002, 0x20002,  //
                                         0x10001, 0x10001, 0x10001, 0x10001, 0, 0, 0, 0);
  return _mm512_permutexvar_epi16(_mm512_add_epi16(lanes, _mm512_set1_epi16(static_cast<short>(s))), v);
}

// Q4_K, 64 codes at a time: the low nibbles of 32 bytes (sub-block 2c) and their high nibbles
// (2c + 1) meet 64 consecutive activations. The int32 sums alternate between two registers, and
// the minimums have accumulators of their own, so that no chain of dependent multiply-adds is
// longer than two per super-block (one thread, 1 x 768 x 768 in L2, Zen 4: 1.05x).
template <int MR>
void q4_k_rows(float* out, int64_t ld_out, const BlockQ4_K* w, const char* act, size_t stride, int64_t nb) {
  __m256 acc[MR], macc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = macc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_ahead(w + b);
    const BlockQ4_K& blk = w[b];
    const Acts<MR> a(act, stride, b);
    const __m128i sm = scale_min_vec(blk.scales);
    const __m512i sc = twice(_mm256_cvtepu8_epi16(sm));
    __m512i wide[2][MR];
    for (int m = 0; m < MR; ++m) wide[0][m] = wide[1][m] = _mm512_setzero_si512();
    #pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i u = _mm512_and_si512(_mm512_srlv_epi16(twice32(blk.qs + 32 * c), halves16(0, 4)), _mm512_set1_epi8(0x0F));
      group_dot64<MR>(wide[c % 2], a, 64 * c, u, _mm512_permutexvar_epi16(halves16(2 * c, 2 * c + 1), sc));
    }
    for (int m = 0; m < MR; ++m) wide[0][m] = _mm512_add_epi32(wide[0][m], wide[1][m]);
    __m256i sumi[MR];
    fold<MR>(sumi, wide[0]);
    scale_and_mins_rows<MR>(acc, macc, a, sumi, blk.d, blk.dmin, mins_twice(sm));
  }
  store_rows<MR>(out, ld_out, acc, macc);
}

// Q5_K as Q4_K, the 5th bits added where a mask register picked them from qh.
template <int MR>
void q5_k_rows(float* out, int64_t ld_out, const BlockQ5_K* w, const char* act, size_t stride, int64_t nb) {
  __m256 acc[MR], macc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = macc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_ahead(w + b);
    const BlockQ5_K& blk = w[b];
    const Acts<MR> a(act, stride, b);
    const __m128i sm = scale_min_vec(blk.scales);
    const __m512i sc = twice(_mm256_cvtepu8_epi16(sm));
    const __m512i qh = twice32(blk.qh);
    __m512i wide[2][MR];
    for (int m = 0; m < MR; ++m) wide[0][m] = wide[1][m] = _mm512_setzero_si512();
    #pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i u = _mm512_and_si512(_mm512_srlv_epi16(twice32(blk.qs + 32 * c), halves16(0, 4)), _mm512_set1_epi8(0x0F));
      const __mmask64 fifth = _mm512_test_epi8_mask(qh, halves16(0x101 << (2 * c), 0x101 << (2 * c + 1)));
      const __m512i u5 = _mm512_mask_add_epi8(u, fifth, u, _mm512_set1_epi8(16));
      group_dot64<MR>(wide[c % 2], a, 64 * c, u5, _mm512_permutexvar_epi16(halves16(2 * c, 2 * c + 1), sc));
    }
    for (int m = 0; m < MR; ++m) wide[0][m] = _mm512_add_epi32(wide[0][m], wide[1][m]);
    __m256i sumi[MR];
    fold<MR>(sumi, wide[0]);
    scale_and_mins_rows<MR>(acc, macc, a, sumi, blk.d, blk.dmin, mins_twice(sm));
  }
  store_rows<MR>(out, ld_out, acc, macc);
}

// Q6_K, 64 codes at a time: the low nibbles of ql[64h ..] are weights 128h .. 128h + 63, the
// high nibbles the next 64; the top bits come from qh[32h ..] shifted per 32.
template <int MR>
void q6_k_rows(float* out, int64_t ld_out, const BlockQ6_K* w, const char* act, size_t stride, int64_t nb) {
  __m256 acc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = _mm256_setzero_ps();
  const __m512i nibble = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(0x30);
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_ahead(w + b);
    const BlockQ6_K& blk = w[b];
    const Acts<MR> a(act, stride, b);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)));
    const __m512i sc = twice(sc16);
    __m512i wide[MR];
    for (int m = 0; m < MR; ++m) wide[m] = _mm512_setzero_si512();
    #pragma GCC unroll 4
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(blk.ql + 64 * h);
      const __m512i qh = twice32(blk.qh + 32 * h);
      const __m512i u0 = _mm512_or_si512(_mm512_and_si512(ql, nibble), _mm512_and_si512(_mm512_sllv_epi16(qh, halves16(4, 2)), top));
      const __m512i u1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), nibble),
                                         _mm512_and_si512(_mm512_srlv_epi16(qh, halves16(0, 2)), top));
      group_dot64<MR>(wide, a, 128 * h, u0, quarter_scales(sc, 8 * h));
      group_dot64<MR>(wide, a, 128 * h + 64, u1, quarter_scales(sc, 8 * h + 4));
    }
    __m256i sumi[MR];
    fold<MR>(sumi, wide);
    offset_rows<MR>(sumi, a, sc16, 5);
    scale_rows<MR>(acc, a, sumi, qsimd::f16(blk.d));
  }
  store_rows<MR>(out, ld_out, acc);
}

#else  // AVX2

template <int MR>
void q4_k_rows(float* out, int64_t ld_out, const BlockQ4_K* w, const char* act, size_t stride, int64_t nb) {
  __m256 acc[MR], macc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = macc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_ahead(w + b);
    const BlockQ4_K& blk = w[b];
    const Acts<MR> a(act, stride, b);
    const __m128i sm = scale_min_vec(blk.scales);
    const __m256i sm2 = _mm256_broadcastsi128_si256(sm);
    __m256i sumi[MR];
    for (int m = 0; m < MR; ++m) sumi[m] = _mm256_setzero_si256();
    #pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i qs = load32(blk.qs + 32 * c);
      group_dot<MR>(sumi, a, 2 * c, low_nibbles(qs), scale_of(sm2, 2 * c));
      group_dot<MR>(sumi, a, 2 * c + 1, low_nibbles(_mm256_srli_epi16(qs, 4)), scale_of(sm2, 2 * c + 1));
    }
    scale_and_mins_rows<MR>(acc, macc, a, sumi, blk.d, blk.dmin, mins_twice(sm));
  }
  store_rows<MR>(out, ld_out, acc, macc);
}

template <int MR>
void q5_k_rows(float* out, int64_t ld_out, const BlockQ5_K* w, const char* act, size_t stride, int64_t nb) {
  __m256 acc[MR], macc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = macc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_ahead(w + b);
    const BlockQ5_K& blk = w[b];
    const Acts<MR> a(act, stride, b);
    const __m128i sm = scale_min_vec(blk.scales);
    const __m256i sm2 = _mm256_broadcastsi128_si256(sm);
    const __m256i qh = load32(blk.qh);
    __m256i sumi[MR];
    for (int m = 0; m < MR; ++m) sumi[m] = _mm256_setzero_si256();
    #pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i qs = load32(blk.qs + 32 * c);
      const __m256i lo = _mm256_or_si256(low_nibbles(qs), bits_at(qh, 2 * c, 4, 1));
      const __m256i hi = _mm256_or_si256(low_nibbles(_mm256_srli_epi16(qs, 4)), bits_at(qh, 2 * c + 1, 4, 1));
      group_dot<MR>(sumi, a, 2 * c, lo, scale_of(sm2, 2 * c));
      group_dot<MR>(sumi, a, 2 * c + 1, hi, scale_of(sm2, 2 * c + 1));
    }
    scale_and_mins_rows<MR>(acc, macc, a, sumi, blk.d, blk.dmin, mins_twice(sm));
  }
  store_rows<MR>(out, ld_out, acc, macc);
}

template <int MR>
void q6_k_rows(float* out, int64_t ld_out, const BlockQ6_K* w, const char* act, size_t stride, int64_t nb) {
  __m256 acc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_ahead(w + b);
    const BlockQ6_K& blk = w[b];
    const Acts<MR> a(act, stride, b);
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
    const __m256i split = split_scales(sc8);
    __m256i sumi[MR];
    for (int m = 0; m < MR; ++m) sumi[m] = _mm256_setzero_si256();
    #pragma GCC unroll 4
    for (int h = 0; h < 2; ++h) {
      const __m256i ql[2] = {load32(blk.ql + 64 * h), load32(blk.ql + 64 * h + 32)};
      const __m256i qh = load32(blk.qh + 32 * h);
      #pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) {
        const __m256i low = low_nibbles(t < 2 ? ql[t] : _mm256_srli_epi16(ql[t - 2], 4));
        group_dot<MR>(sumi, a, 4 * h + t, _mm256_or_si256(low, bits_at(qh, 2 * t, 4, 2)), pair_scale(split, 4 * h + t));
      }
    }
    offset_rows<MR>(sumi, a, _mm256_cvtepi8_epi16(sc8), 5);
    scale_rows<MR>(acc, a, sumi, qsimd::f16(blk.d));
  }
  store_rows<MR>(out, ld_out, acc);
}

#endif  // AVX-512 or AVX2

template <int MR>
void q3_k_rows(float* out, int64_t ld_out, const BlockQ3_K* w, const char* act, size_t stride, int64_t nb) {
  __m256 acc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_ahead(w + b);
    const BlockQ3_K& blk = w[b];
    const Acts<MR> a(act, stride, b);
    const __m128i sc8 = q3_scales_vec(blk.scales);
    const __m256i split = split_scales(sc8);
    const __m256i hm = load32(blk.hmask);
    __m256i sumi[MR];
    for (int m = 0; m < MR; ++m) sumi[m] = _mm256_setzero_si256();
    #pragma GCC unroll 4
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = load32(blk.qs + 32 * h);
      #pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const __m256i u = _mm256_or_si256(bits_at(qs, 2 * s, 0, 2), bits_at(hm, 4 * h + s, 2, 1));
        group_dot<MR>(sumi, a, 4 * h + s, u, pair_scale(split, 4 * h + s));
      }
    }
    offset_rows<MR>(sumi, a, _mm256_cvtepi8_epi16(sc8), 2);
    scale_rows<MR>(acc, a, sumi, qsimd::f16(blk.d));
  }
  store_rows<MR>(out, ld_out, acc);
}

template <int MR>
void q2_k_rows(float* out, int64_t ld_out, const BlockQ2_K* w, const char* act, size_t stride, int64_t nb) {
  __m256 acc[MR], macc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = macc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_ahead(w + b);
    const BlockQ2_K& blk = w[b];
    const Acts<MR> a(act, stride, b);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
    const __m128i nibble = _mm_set1_epi8(0x0F);
    const __m256i split = split_scales(_mm_and_si128(packed, nibble));
    __m256i sumi[MR];
    for (int m = 0; m < MR; ++m) sumi[m] = _mm256_setzero_si256();
    #pragma GCC unroll 4
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = load32(blk.qs + 32 * h);
      #pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) group_dot<MR>(sumi, a, 4 * h + s, bits_at(qs, 2 * s, 0, 2), pair_scale(split, 4 * h + s));
    }
    scale_and_mins_rows<MR>(acc, macc, a, sumi, blk.d, blk.dmin, _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), nibble)));
  }
  store_rows<MR>(out, ld_out, acc, macc);
}

#define MINFER_K_DISPATCH(kernel, Block)                                                        \
  do {                                                                                          \
    const auto* w = static_cast<const Block*>(w_row);                                           \
    const char* a = static_cast<const char*>(act);                                              \
    switch (rows) {                                                                             \
      case 4: return kernel<4>(out, ld_out, w, a, act_stride, nb);                              \
      case 3: return kernel<3>(out, ld_out, w, a, act_stride, nb);                              \
      case 2: return kernel<2>(out, ld_out, w, a, act_stride, nb);                              \
      default: return kernel<1>(out, ld_out, w, a, act_stride, nb);                             \
    }                                                                                           \
  } while (0)

#else  // scalar

// Q4_K / Q5_K: the 8 6-bit scales into sm[0..7] and the 8 mins into sm[8..15] (k_scale_min).
inline void unpack_scale_min(const uint8_t* packed, uint8_t* sm) {
  uint32_t w[3];
  std::memcpy(w, packed, 12);
  const uint32_t six = 0x3F3F3F3F, four = 0x0F0F0F0F, two = 0x03030303;
  const uint32_t out[4] = {w[0] & six, (w[2] & four) | (((w[0] >> 6) & two) << 4), w[1] & six,
                           ((w[2] >> 4) & four) | (((w[1] >> 6) & two) << 4)};
  std::memcpy(sm, out, 16);
}

// Q3_K: the 16 6-bit scales, less 32 (q3_k_scale).
inline void unpack_q3_scales(const uint8_t* packed, int8_t* sc) {
  uint32_t w[3];
  std::memcpy(w, packed, 12);
  const uint32_t four = 0x0F0F0F0F, two = 0x03030303;
  uint32_t out[4];
  for (int i = 0; i < 4; ++i) out[i] = ((w[i % 2] >> (4 * (i / 2))) & four) | (((w[2] >> (2 * i)) & two) << 4);
  uint8_t u[16];
  std::memcpy(u, out, 16);
  for (int i = 0; i < 16; ++i) sc[i] = static_cast<int8_t>(u[i] - 32);
}

// One super-block decoded: weight 16i + k is d * sc[i] * q[16i + k] - dmin * m[i].
struct Decoded {
  int8_t q[kQK];
  int sc[16], m[16];
  float d, dmin;
};

void decode(const BlockQ2_K& b, Decoded& k) {
  for (int e = 0; e < kQK; ++e) k.q[e] = static_cast<int8_t>((b.qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3);
  for (int i = 0; i < 16; ++i) {
    k.sc[i] = b.scales[i] & 0xF;
    k.m[i] = b.scales[i] >> 4;
  }
  k.d = f16_to_f32(b.d);
  k.dmin = f16_to_f32(b.dmin);
}
void decode(const BlockQ3_K& b, Decoded& k) {
  for (int e = 0; e < kQK; ++e) {
    const int low = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
    k.q[e] = static_cast<int8_t>(low - (((b.hmask[e % 32] >> (e / 32)) & 1) ? 0 : 4));
  }
  int8_t sc[16];
  unpack_q3_scales(b.scales, sc);
  for (int i = 0; i < 16; ++i) {
    k.sc[i] = sc[i];
    k.m[i] = 0;
  }
  k.d = f16_to_f32(b.d);
  k.dmin = 0.0f;
}
template <typename Block>
void decode_q45(const Block& b, const uint8_t* qh, Decoded& k) {
  for (int e = 0; e < kQK; ++e) {
    const int j = e / 32, l = e % 32;
    const int high = qh != nullptr ? ((qh[l] >> j) & 1) << 4 : 0;
    k.q[e] = static_cast<int8_t>(((b.qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) | high);
  }
  uint8_t sm[16];
  unpack_scale_min(b.scales, sm);
  for (int i = 0; i < 16; ++i) {
    k.sc[i] = sm[i / 2];
    k.m[i] = sm[8 + i / 2];
  }
  k.d = f16_to_f32(b.d);
  k.dmin = f16_to_f32(b.dmin);
}
void decode(const BlockQ4_K& b, Decoded& k) { decode_q45(b, nullptr, k); }
void decode(const BlockQ5_K& b, Decoded& k) { decode_q45(b, b.qh, k); }
void decode(const BlockQ6_K& b, Decoded& k) {
  for (int e = 0; e < kQK; ++e) {
    const int h = e / 128, r = e % 128;
    const int low = (b.ql[64 * h + r % 64] >> (4 * (r / 64))) & 0xF;
    const int high = (b.qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
    k.q[e] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
  for (int i = 0; i < 16; ++i) {
    k.sc[i] = b.scales[i];
    k.m[i] = 0;
  }
  k.d = f16_to_f32(b.d);
  k.dmin = 0.0f;
}

// dx * (d * sum_i sc_i * sum(q * x) - dmin * sum_i m_i * bsum_i) of one decoded super-block.
float block_dot(const Decoded& k, const ActQ8_K& x) {
  int32_t sumi = 0, summ = 0;
  for (int i = 0; i < 16; ++i) {
    int32_t s = 0;
    for (int j = 0; j < 16; ++j) s += int32_t(k.q[16 * i + j]) * int32_t(x.q[16 * i + j]);
    sumi += k.sc[i] * s;
    summ += k.m[i] * x.bsums[i];
  }
  return x.d * (k.d * float(sumi) - k.dmin * float(summ));
}

template <typename Block>
void k_rows(float* out, int64_t ld_out, const void* w_row, const void* act, size_t stride, int rows, int64_t nb) {
  const auto* w = static_cast<const Block*>(w_row);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  Decoded k;
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_ahead(w + b);
    decode(w[b], k);
    for (int m = 0; m < rows; ++m) acc[m] += block_dot(k, act_row(static_cast<const char*>(act), stride, m)[b]);
  }
  for (int m = 0; m < rows; ++m) out[m * ld_out] = acc[m];
}

#endif

}  // namespace

#if defined(MINFER_K_SIMD)
void dot_rows_q2_k(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb) {
  MINFER_K_DISPATCH(q2_k_rows, BlockQ2_K);
}
void dot_rows_q3_k(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb) {
  MINFER_K_DISPATCH(q3_k_rows, BlockQ3_K);
}
void dot_rows_q4_k(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb) {
  MINFER_K_DISPATCH(q4_k_rows, BlockQ4_K);
}
void dot_rows_q5_k(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb) {
  MINFER_K_DISPATCH(q5_k_rows, BlockQ5_K);
}
void dot_rows_q6_k(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb) {
  MINFER_K_DISPATCH(q6_k_rows, BlockQ6_K);
}
#else
void dot_rows_q2_k(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb) {
  k_rows<BlockQ2_K>(out, ld_out, w_row, act, act_stride, rows, nb);
}
void dot_rows_q3_k(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb) {
  k_rows<BlockQ3_K>(out, ld_out, w_row, act, act_stride, rows, nb);
}
void dot_rows_q4_k(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb) {
  k_rows<BlockQ4_K>(out, ld_out, w_row, act, act_stride, rows, nb);
}
void dot_rows_q5_k(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb) {
  k_rows<BlockQ5_K>(out, ld_out, w_row, act, act_stride, rows, nb);
}
void dot_rows_q6_k(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows, int64_t nb) {
  k_rows<BlockQ6_K>(out, ld_out, w_row, act, act_stride, rows, nb);
}
#endif

}  // namespace minfer::cpu
