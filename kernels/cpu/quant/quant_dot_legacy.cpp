// The legacy 32-weight types Q4_0, Q4_1, Q5_0 and Q5_1 against 8-bit activations
// (kernels/cpu/quant/quant_dot.h).
//
// Per block, u is the weight's unsigned code (0..15, or 0..31 with the 5th bit from qh):
//   Q4_0, Q5_0  qw = u - 8 (u - 16), a signed byte:  sum w*x = dw * dx * sum(qw * qx)
//               summed as |qw| * (qx negated where qw < 0) in unsigned-by-signed byte
//               multiply-adds, as Q8_0. Q5_0's qw is u where the 5th bit is set, else u - 16.
//   Q4_1, Q5_1  u is the unsigned operand as it is:    sum w*x = dw * dx * sum(u * qx) + m * sx
//               with sx = dx * sum(qx) stored in the activation block (ActQ8_1::s).
// The integer sum is exact (a pair of products stays within +-7874, far from int16's limit); it is
// converted and scaled once per block into f32 vector accumulators, summed across lanes once per
// row. The minimum's term m * sx is a vector sum per row on AVX-512, a scalar one otherwise.
//
// Paths, each loading and decoding a weight block once for the MR (1..4) activation rows:
//   AVX-512  two blocks (64 codes) per 512-bit register against two activation blocks of a row;
//            the 5th bits go straight into a mask register, Q4_0's |qw| comes from a 16-byte table,
//            the f16 scales of four blocks are converted in one instruction.
//   AVX2     one block per 256-bit register; two sets of accumulators, even and odd blocks (Q4_1,
//            Q5_0, Q5_1; and the AVX-512 path's odd last block).
//   scalar   a block decoded to 32 bytes, integer sums per block.
// Q4_0 has paths of its own on AVX-512 with VBMI and VNNI and on AVX2 (q4_0_group_rows): four
// blocks at a time against activations laid out to match (ActQ8_0x4), unsigned codes.
#include "kernels/cpu/quant/quant_dot.h"

#include <array>
#include <cstring>

#include "kernels/cpu/quant/quant_simd.h"

namespace minfer::cpu {

namespace {

#if defined(__AVX2__)
constexpr int kPrefetch = 4096;  // bytes ahead of the weight stream (bench/results/NOTES.md)
#endif

// Q4_0 takes q4_0_group_rows, not the paths of the other three: on AVX-512 with VBMI and VNNI, and
// on AVX2 (with FMA and F16C) where AVX-512 F and BW are absent.
#if defined(__AVX512VBMI__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define MINFER_Q4_0_GROUPS 1
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !(defined(__AVX512F__) && defined(__AVX512BW__))
#define MINFER_Q4_0_GROUPS 1
#define MINFER_Q4_0_GROUPS_AVX2 1
#endif

// Type traits: the block, its activation block, and whether it has a minimum (the _1 types,
// unsigned codes) or an offset (the _0 types, signed codes).
#if !defined(MINFER_Q4_0_GROUPS)
struct Q4_0 {
  using Block = BlockQ4_0;
  using Act = ActQ8_0;
  static constexpr bool kMin = false, kFive = false;
};
#endif
struct Q4_1 {
  using Block = BlockQ4_1;
  using Act = ActQ8_1;
  static constexpr bool kMin = true, kFive = false;
};
struct Q5_0 {
  using Block = BlockQ5_0;
  using Act = ActQ8_0;
  static constexpr bool kMin = false, kFive = true;
};
struct Q5_1 {
  using Block = BlockQ5_1;
  using Act = ActQ8_1;
  static constexpr bool kMin = true, kFive = true;
};

template <class T>
const typename T::Act* act_row(const char* act, size_t stride, int m) {
  return reinterpret_cast<const typename T::Act*>(act + size_t(m) * stride);
}

uint32_t fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return bits;
}

template <class T>
float min_of(const typename T::Block& b) {
  if constexpr (T::kMin) return qsimd::f16(b.m);
  return 0.0f;
}

#if defined(__AVX2__)
// The 32 codes u of a block, weight j in byte j: low nibbles of qs, then high nibbles.
inline __m256i nibbles(const uint8_t* qs) {
  const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m256i shifted = _mm256_srlv_epi32(both, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));  // upper half
  return _mm256_and_si256(shifted, _mm256_set1_epi8(0x0F));
}

// 0xFF in byte j where bit j of qh (32 bits, little-endian) is set, else 0.
inline __m256i bit_bytes(const uint8_t* qh) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(int(fifth_bits(qh))), spread);
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
}

// The block's 32 weight codes: qw (signed) for the _0 types, u for the _1 types.
template <class T>
__m256i codes256(const typename T::Block& b) {
  const __m256i u = nibbles(b.qs);
  if constexpr (!T::kFive) {
    if constexpr (T::kMin) return u;
    return _mm256_sub_epi8(u, _mm256_set1_epi8(8));
  } else {
    const __m256i high = bit_bytes(b.qh);
    if constexpr (T::kMin) return _mm256_or_si256(u, _mm256_and_si256(high, _mm256_set1_epi8(0x10)));
    return _mm256_or_si256(u, _mm256_andnot_si256(high, _mm256_set1_epi8(int8_t(0xF0))));
  }
}

// One weight block b against block b of MR activation rows: acc[m] += dw * dx * (8 partial sums
// of the integer products), mins[m] += m * sx.
template <class T, int MR>
inline void block256(__m256* acc, float* mins, const typename T::Block& w, const char* act, size_t stride,
                     int64_t b) {
  const __m256i q = codes256<T>(w);
  const __m256i u = T::kMin ? q : _mm256_sign_epi8(q, q);
  const __m256 dw = _mm256_set1_ps(qsimd::f16(w.d));
  const float mw = min_of<T>(w);
  for (int m = 0; m < MR; ++m) {
    const typename T::Act& a = act_row<T>(act, stride, m)[b];
    __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q));
    if constexpr (!T::kMin) x = _mm256_sign_epi8(x, q);
    const __m256 scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(&a.d));
    acc[m] = _mm256_fmadd_ps(scale, qsimd::dot_i8_abs(u, x), acc[m]);
    if constexpr (T::kMin) mins[m] += mw * a.s;
  }
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__)
// The maskz_ forms with every lane selected: g++ 12's plain forms start from _mm512_undefined_*
// and -Werror=maybe-uninitialized stops on them (GCC bug 105593).
constexpr __mmask16 kAll16 = 0xFFFF;
inline __m512i join(__m256i low, __m256i high) {
  return _mm512_maskz_inserti64x4(__mmask8(0xFF), _mm512_castsi256_si512(low), high, 1);
}
inline __m512 to_f32(__m512i v) { return _mm512_maskz_cvtepi32_ps(kAll16, v); }
template <int I>
inline __m256 half(__m512 v) {
  return _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(__mmask8(0xF), _mm512_castps_pd(v), I));
}
inline float hsum512(__m512 v) { return qsimd::hsum(_mm256_add_ps(half<0>(v), half<1>(v))); }
inline __m128i load128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// The f16 fields get(w[i]) of N <= 4 blocks as f32 lanes 0 .. N-1, converted in one instruction.
template <int N, class Block, class Get>
inline __m128 f16x4(const Block* w, Get get) {
  uint64_t h = 0;
  for (int i = 0; i < N; ++i) h |= uint64_t(get(w[i])) << (16 * i);
  return _mm_cvtph_ps(_mm_cvtsi64_si128(int64_t(h)));
}
// [v[I] in lanes 0..7, v[I + 1] in lanes 8..15]: the scales of a pair of blocks.
template <int I>
inline __m512 spread(__m128 v) {
  const __m512i index = _mm512_set_epi32(I + 1, I + 1, I + 1, I + 1, I + 1, I + 1, I + 1, I + 1,  //
                                         I, I, I, I, I, I, I, I);
  return _mm512_maskz_permutexvar_ps(kAll16, index, _mm512_castps128_ps512(v));
}
// The same for two floats in memory: a in lanes 0..7, b in lanes 8..15.
inline __m512 pair(const float& a, const float& b) {
  return _mm512_mask_broadcastss_ps(_mm512_set1_ps(a), __mmask16(0xFF00), _mm_load_ss(&b));
}

// The 64 codes u of blocks b0 and b1, block i in bytes 32i .. 32i + 31 (lanes of 128 bits: b0's
// low nibbles, b0's high nibbles, b1's low, b1's high).
inline __m512i nibbles2(const uint8_t* qs0, const uint8_t* qs1) {
  const __m512i v = _mm512_mask_broadcast_i32x4(_mm512_maskz_broadcast_i32x4(kAll16, load128(qs0)),
                                                __mmask16(0xFF00), load128(qs1));
#if defined(__GFNI__)
  // Each byte times a bit matrix (one per 64 bits): bits 0..3 kept, or bits 4..7 moved down.
  const int64_t low = 0x0102040800000000, high = 0x1020408000000000;
  return _mm512_gf2p8affine_epi64_epi8(v, _mm512_set_epi64(high, high, low, low, high, high, low, low), 0);
#else
  const __m512i shifted = _mm512_mask_srli_epi16(v, __mmask32(0xFF00FF00u), v, 4);  // lanes 1 and 3
  return _mm512_and_si512(shifted, _mm512_set1_epi8(0x0F));
#endif
}

// Two blocks' codes as the unsigned operand u (|qw| for the _0 types) and, for the _0 types, the
// bytes where qw < 0 (the activations to negate there).
struct Codes512 {
  __m512i u;
  __mmask64 negative;
};
template <class T>
Codes512 codes512(const typename T::Block& b0, const typename T::Block& b1) {
  const __m512i u = nibbles2(b0.qs, b1.qs);
  if constexpr (!T::kFive) {
    if constexpr (T::kMin) return {u, 0};
    // |u - 8| by table, and qw < 0 where u < 8.
    const __m512i abs =
        _mm512_maskz_broadcast_i32x4(kAll16, _mm_setr_epi8(8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6, 7));
    return {_mm512_maskz_shuffle_epi8(~__mmask64(0), abs, u), _mm512_cmplt_epu8_mask(u, _mm512_set1_epi8(8))};
  } else {
    const uint64_t high = uint64_t(fifth_bits(b0.qh)) | uint64_t(fifth_bits(b1.qh)) << 32;
    const __m512i sixteen = _mm512_set1_epi8(16);
    if constexpr (T::kMin) return {_mm512_mask_add_epi8(u, _cvtu64_mask64(high), u, sixteen), 0};
    // qw = u - 16 < 0 where the 5th bit is clear, |qw| = 16 - u there.
    const __mmask64 low = _cvtu64_mask64(~high);
    return {_mm512_mask_sub_epi8(u, low, sixteen, u), low};
  }
}

// The 16 int32 sums of four products of unsigned bytes u and signed bytes s.
inline __m512i dot512(__m512i u, __m512i s) {
#if defined(__AVX512VNNI__)
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s);
#else
  return _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1));
#endif
}

// Weight blocks b and b + 1 (scales dw, minimums mw as spread) against the same blocks of MR
// activation rows: acc[m] += dw * dx * (16 partial sums), macc[m] += mw * sx in each of 8 lanes.
template <class T, int MR>
inline void pair512(__m512* acc, __m512* macc, const typename T::Block* w, const char* act, size_t stride,
                    int64_t b, __m512 dw, __m512 mw) {
  const Codes512 q = codes512<T>(w[b], w[b + 1]);
  for (int m = 0; m < MR; ++m) {
    const typename T::Act* a = act_row<T>(act, stride, m) + b;
    __m512i x = join(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[0].q)),
                     _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[1].q)));
    if constexpr (!T::kMin) x = _mm512_mask_sub_epi8(x, q.negative, _mm512_setzero_si512(), x);
    acc[m] = _mm512_fmadd_ps(_mm512_mul_ps(dw, pair(a[0].d, a[1].d)), to_f32(dot512(q.u, x)), acc[m]);
    if constexpr (T::kMin) macc[m] = _mm512_fmadd_ps(mw, pair(a[0].s, a[1].s), macc[m]);
  }
}

// Blocks b .. b + N - 1 (N = 2 or 4), their scales converted together.
template <class T, int MR, int N>
inline void blocks512(__m512* acc, __m512* macc, const typename T::Block* w, const char* act, size_t stride,
                      int64_t b) {
  using Block = typename T::Block;
  const __m128 d = f16x4<N>(w + b, [](const Block& x) { return x.d; });
  __m128 mins = _mm_setzero_ps();
  if constexpr (T::kMin) mins = f16x4<N>(w + b, [](const Block& x) { return x.m; });
  pair512<T, MR>(acc, macc, w, act, stride, b, spread<0>(d), spread<0>(mins));
  if constexpr (N == 4) pair512<T, MR>(acc, macc, w, act, stride, b + 2, spread<2>(d), spread<2>(mins));
}

// An odd last block, 256 bits wide, added into the lower half of acc.
template <class T, int MR>
inline void last_block(__m512* acc, float* mins, const typename T::Block& w, const char* act, size_t stride,
                       int64_t b) {
  __m256 tail[MR];
  for (int m = 0; m < MR; ++m) tail[m] = _mm256_setzero_ps();
  block256<T, MR>(tail, mins, w, act, stride, b);
  for (int m = 0; m < MR; ++m)
    acc[m] = _mm512_mask_add_ps(acc[m], __mmask16(0xFF), acc[m], _mm512_castps256_ps512(tail[m]));
}

template <class T, int MR>
void rows_mr(float* out, int64_t ld_out, const typename T::Block* w, const char* act, size_t stride, int64_t nb) {
  __m512 acc[MR], macc[MR];
  float mins[MR];
  for (int m = 0; m < MR; ++m) {
    acc[m] = macc[m] = _mm512_setzero_ps();
    mins[m] = 0.0f;
  }
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    const char* ahead = reinterpret_cast<const char*>(w + b) + kPrefetch;
    __builtin_prefetch(ahead);
    __builtin_prefetch(ahead + 64);  // 4 blocks are 72 .. 96 bytes
    blocks512<T, MR, 4>(acc, macc, w, act, stride, b);
  }
  if (b + 2 <= nb) {
    blocks512<T, MR, 2>(acc, macc, w, act, stride, b);
    b += 2;
  }
  if (b < nb) last_block<T, MR>(acc, mins, w[b], act, stride, b);
  for (int m = 0; m < MR; ++m) {
    float sum = hsum512(acc[m]);
    if constexpr (T::kMin) sum += mins[m] + hsum512(macc[m]) * 0.125f;  // macc: 8 lanes per block
    out[m * ld_out] = sum;
  }
}
#elif defined(__AVX2__)
// Two sets of accumulators (even and odd blocks), so that the additions into one accumulator, four
// cycles apart, do not set the pace at one or two rows.
// note: two sets for every MR, though three or four rows would keep the adders busy with one, so
// that a row's sum is added in the same order whatever the rows with it: batched decode then gives
// each sequence the logits it gets alone (tests/isa/test_quant_dot.cpp, BatchInvariant).
template <class T, int MR>
void rows_mr(float* out, int64_t ld_out, const typename T::Block* w, const char* act, size_t stride, int64_t nb) {
  constexpr int kSets = 2;
  __m256 acc[kSets][MR];
  float mins[kSets][MR];
  for (int i = 0; i < kSets; ++i)
    for (int m = 0; m < MR; ++m) {
      acc[i][m] = _mm256_setzero_ps();
      mins[i][m] = 0.0f;
    }
  int64_t b = 0;
  for (; b + kSets <= nb; b += kSets)
    for (int i = 0; i < kSets; ++i) {
      __builtin_prefetch(reinterpret_cast<const char*>(w + b + i) + kPrefetch);
      block256<T, MR>(acc[i], mins[i], w[b + i], act, stride, b + i);
    }
  if (b < nb) block256<T, MR>(acc[0], mins[0], w[b], act, stride, b);
  for (int m = 0; m < MR; ++m) {
    __m256 sum = acc[0][m];
    float min_sum = mins[0][m];
    for (int i = 1; i < kSets; ++i) {
      sum = _mm256_add_ps(sum, acc[i][m]);
      min_sum += mins[i][m];
    }
    out[m * ld_out] = qsimd::hsum(sum) + min_sum;
  }
}
#else
// The block's 32 weight codes as bytes: qw for the _0 types, u for the _1 types.
template <class T>
void codes(int8_t* q, const typename T::Block& b) {
  const int offset = T::kMin ? 0 : (T::kFive ? 16 : 8);
  for (int j = 0; j < 32; ++j) {
    int u = j < 16 ? b.qs[j] & 0xF : b.qs[j - 16] >> 4;
    if constexpr (T::kFive) u |= int((fifth_bits(b.qh) >> j) & 1) << 4;
    q[j] = static_cast<int8_t>(u - offset);
  }
}

template <class T, int MR>
void rows_mr(float* out, int64_t ld_out, const typename T::Block* w, const char* act, size_t stride, int64_t nb) {
  float sums[MR] = {};
  for (int64_t b = 0; b < nb; ++b) {
    int8_t q[32];
    codes<T>(q, w[b]);
    const float dw = f16_to_f32(w[b].d), mw = min_of<T>(w[b]);
    for (int m = 0; m < MR; ++m) {
      const typename T::Act& a = act_row<T>(act, stride, m)[b];
      int32_t dot = 0;
      for (int j = 0; j < 32; ++j) dot += int32_t(q[j]) * int32_t(a.q[j]);
      sums[m] += dw * a.d * float(dot);
      if constexpr (T::kMin) sums[m] += mw * a.s;
    }
  }
  for (int m = 0; m < MR; ++m) out[m * ld_out] = sums[m];
}
#endif

#if defined(MINFER_Q4_0_GROUPS) && !defined(MINFER_Q4_0_GROUPS_AVX2)
// Q4_0 four blocks (72 bytes) at a time, from two overlapping loads (bytes 0..63 and 8..71) and
// one byte permutation of the pair (vpermt2b): the 16 code bytes of block i land in 128-bit lane
// i, so the low nibbles are weights 0..15 of the four blocks and the high nibbles weights 16..31,
// against activations laid out to match (ActQ8_0x4). Each block's four int32 lanes start at
// -2 * sum(q), so that the unsigned codes u sum to (u - 8) * q, and one word permutation puts the
// four f16 scales in those lanes for one conversion. A row's last, partial group is loaded under
// a mask: its missing blocks read as codes and scales of zero against zero activations.
// note: about a third of the instructions of the pair-of-blocks loop above, which gathers the
// scales one by one and negates activations by the codes' signs.
constexpr std::array<uint8_t, 64> q4_0_group_qs_index() {
  std::array<uint8_t, 64> index{};
  for (int i = 0; i < 64; ++i) {
    const int block = i / 16, byte = 18 * block + 2 + i % 16;  // in the group
    index[size_t(i)] = static_cast<uint8_t>(block < 3 ? byte : 64 + byte - 8);  // block 3 from the second load
  }
  return index;
}
constexpr std::array<uint16_t, 32> q4_0_group_d_index() {
  std::array<uint16_t, 32> index{};
  for (int lane = 0; lane < 16; ++lane) index[size_t(lane)] = static_cast<uint16_t>(9 * (lane / 4));  // word 9i
  return index;
}
alignas(64) constexpr std::array<uint8_t, 64> kQ4_0GroupQs = q4_0_group_qs_index();
alignas(64) constexpr std::array<uint16_t, 32> kQ4_0GroupD = q4_0_group_d_index();

inline __mmask64 first_bytes(int64_t n) { return (__mmask64(1) << n) - 1; }  // n < 64

template <int MR>
void q4_0_group_rows(float* out, int64_t ld_out, const uint8_t* w, const char* act, size_t stride, int64_t nb) {
  const __m512i qs_index = _mm512_load_si512(kQ4_0GroupQs.data());
  const __m512i d_index = _mm512_load_si512(kQ4_0GroupD.data());
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = _mm512_setzero_ps();
  for (int64_t g = 0; 4 * g < nb; ++g) {
    const uint8_t* p = w + 72 * g;
    __m512i v0, v1;
    if (4 * g + 4 <= nb) {
      __builtin_prefetch(p + kPrefetch);
      __builtin_prefetch(p + kPrefetch + 64);
      v0 = _mm512_loadu_si512(p);
      v1 = _mm512_loadu_si512(p + 8);
    } else {
      v0 = _mm512_maskz_loadu_epi8(first_bytes(18 * (nb - 4 * g)), p);  // blocks 0..2 lie in bytes 0..53
      v1 = _mm512_setzero_si512();
    }
    const __m512i qs = _mm512_permutex2var_epi8(v0, qs_index, v1);
    const __m512i low = _mm512_and_si512(qs, low4), high = _mm512_and_si512(_mm512_srli_epi16(qs, 4), low4);
    const __m256i d16 = _mm512_maskz_extracti64x4_epi64(__mmask8(0xF), _mm512_maskz_permutexvar_epi16(~__mmask32(0), d_index, v0), 0);
    const __m512 dw = _mm512_maskz_cvtph_ps(kAll16, d16);
    for (int m = 0; m < MR; ++m) {
      const ActQ8_0x4& a = reinterpret_cast<const ActQ8_0x4*>(act + size_t(m) * stride)[g];
      __m512i sum = _mm512_dpbusd_epi32(_mm512_loadu_si512(a.offset), low, _mm512_loadu_si512(a.low));
      sum = _mm512_dpbusd_epi32(sum, high, _mm512_loadu_si512(a.high));
      acc[m] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_loadu_ps(a.d)), to_f32(sum), acc[m]);
    }
  }
  for (int m = 0; m < MR; ++m) out[m * ld_out] = hsum512(acc[m]);
}
#elif defined(MINFER_Q4_0_GROUPS_AVX2)
// Q4_0 on AVX2 against the same ActQ8_0x4 groups, two blocks (36 bytes) per 256-bit register:
// block i of the pair in 128-bit lane i, its low nibbles against `low` and its high nibbles against
// `high`, unsigned codes u in unsigned-by-signed multiply-adds (|u * q| + |u * q'| <= 3810, so the
// int16 sum of the low and the high pair stays exact), the int32 lanes of block i starting at
// -2 * sum(q) as above, and the two f16 scales converted in one instruction, four lanes each.
// note: no code is negated by its sign and no scale broadcast alone, as the one-block loop of the
// other types does: about two thirds of its instructions per block.

// Blocks 2h and 2h + 1 of group g (TWO: the second exists) against MR activation rows.
template <int MR, bool TWO>
inline void q4_0_pair(__m256* acc,
                      const BlockQ4_0* b,  // (1 + TWO) blocks: 4g + 2h and the next
                      const char* act,     // (MR) rows of ActQ8_0x4 groups, stride bytes apart
                      size_t stride, int64_t g, int h) {
  const __m128i qs0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[0].qs));
  const __m256i qs = TWO ? _mm256_inserti128_si256(_mm256_castsi128_si256(qs0),
                                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[1].qs)), 1)
                         : _mm256_inserti128_si256(_mm256_setzero_si256(), qs0, 0);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i low = _mm256_and_si256(qs, low4), high = _mm256_and_si256(_mm256_srli_epi16(qs, 4), low4);
  const uint32_t d16 = uint32_t(b[0].d) | (TWO ? uint32_t(b[1].d) << 16 : 0u);
  const __m128i spread = _mm_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3);
  const __m256 dw = _mm256_cvtph_ps(_mm_shuffle_epi8(_mm_cvtsi32_si128(int(d16)), spread));
  for (int m = 0; m < MR; ++m) {
    const ActQ8_0x4& a = reinterpret_cast<const ActQ8_0x4*>(act + size_t(m) * stride)[g];
    const __m256i xl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.low + 32 * h));
    const __m256i xh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.high + 32 * h));
    const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(low, xl), _mm256_maddubs_epi16(high, xh));
    const __m256i sum = _mm256_add_epi32(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)),
                                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.offset + 8 * h)));
    acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_loadu_ps(a.d + 8 * h)), _mm256_cvtepi32_ps(sum), acc[m]);
  }
}

// Two sets of accumulators (the pair of blocks 0, 1 and the pair 2, 3), for every MR as in rows_mr.
template <int MR>
void q4_0_group_rows(float* out, int64_t ld_out,
                     const uint8_t* w,  // (nb) Q4_0 blocks of one weight row
                     const char* act,   // (MR) rows of ceil(nb / 4) ActQ8_0x4 groups, stride bytes apart
                     size_t stride, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ4_0*>(w);
  constexpr int kSets = 2;
  __m256 acc[kSets][MR];
  for (auto& set : acc)
    for (auto& a : set) a = _mm256_setzero_ps();
  int64_t g = 0;
  for (; 4 * g + 4 <= nb; ++g) {
    const BlockQ4_0* b = blocks + 4 * g;
    __builtin_prefetch(reinterpret_cast<const char*>(b) + kPrefetch);
    __builtin_prefetch(reinterpret_cast<const char*>(b) + kPrefetch + 64);
    q4_0_pair<MR, true>(acc[0], b, act, stride, g, 0);
    q4_0_pair<MR, true>(acc[kSets - 1], b + 2, act, stride, g, 1);
  }
  const int64_t left = nb - 4 * g;  // 0 .. 3 blocks of a last, partial group
  const BlockQ4_0* b = blocks + 4 * g;
  if (left == 1) q4_0_pair<MR, false>(acc[0], b, act, stride, g, 0);
  if (left >= 2) q4_0_pair<MR, true>(acc[0], b, act, stride, g, 0);
  if (left == 3) q4_0_pair<MR, false>(acc[0], b + 2, act, stride, g, 1);
  for (int m = 0; m < MR; ++m) {
    __m256 sum = acc[0][m];
    for (int i = 1; i < kSets; ++i) sum = _mm256_add_ps(sum, acc[i][m]);
    out[m * ld_out] = qsimd::hsum(sum);
  }
}
#endif

template <class T>
void dot_rows(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows,
              int64_t nb) {
  const auto* w = static_cast<const typename T::Block*>(w_row);
  const char* a = static_cast<const char*>(act);
  switch (rows) {
    case 4: return rows_mr<T, 4>(out, ld_out, w, a, act_stride, nb);
    case 3: return rows_mr<T, 3>(out, ld_out, w, a, act_stride, nb);
    case 2: return rows_mr<T, 2>(out, ld_out, w, a, act_stride, nb);
    default: return rows_mr<T, 1>(out, ld_out, w, a, act_stride, nb);
  }
}

}  // namespace

void dot_rows_q4_0(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows,
                   int64_t nb) {
#if defined(MINFER_Q4_0_GROUPS)
  const auto* w = static_cast<const uint8_t*>(w_row);
  const char* a = static_cast<const char*>(act);
  switch (rows) {
    case 4: return q4_0_group_rows<4>(out, ld_out, w, a, act_stride, nb);
    case 3: return q4_0_group_rows<3>(out, ld_out, w, a, act_stride, nb);
    case 2: return q4_0_group_rows<2>(out, ld_out, w, a, act_stride, nb);
    default: return q4_0_group_rows<1>(out, ld_out, w, a, act_stride, nb);
  }
#else
  dot_rows<Q4_0>(out, ld_out, w_row, act, act_stride, rows, nb);
#endif
}
void dot_rows_q4_1(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows,
                   int64_t nb) {
  dot_rows<Q4_1>(out, ld_out, w_row, act, act_stride, rows, nb);
}
void dot_rows_q5_0(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows,
                   int64_t nb) {
  dot_rows<Q5_0>(out, ld_out, w_row, act, act_stride, rows, nb);
}
void dot_rows_q5_1(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows,
                   int64_t nb) {
  dot_rows<Q5_1>(out, ld_out, w_row, act, act_stride, rows, nb);
}

bool q4_0_dot_reads_groups() {
#if defined(MINFER_Q4_0_GROUPS)
  return true;
#else
  return false;
#endif
}

}  // namespace minfer::cpu
