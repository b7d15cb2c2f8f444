// The packed layout of the legacy types (q8_0, q4_0, q4_1, q5_0, q5_1) and their kernels
// (kernels/cpu/quant/packed_tile.h), for AVX-512 VNNI and for AVX2.
//
// A group holds 16 file rows r = 0..15 of nb blocks. Packed, it is nb block-groups, one per block
// index b, in order; block-group b holds exactly the bytes of the 16 rows' block b, rearranged so
// that one 64-byte vector holds 4 consecutive codes of each of the 16 rows (byte 4r + i: row r),
// the order in which vpdpbusd adds 4 products into each of its 16 int32 lanes:
//
//   Q4_0, block-group b (16 x 18 = 288 bytes); qs_r, d_r: row r's block b
//   byte 0        4        8               60       64
//        | qs_0[0..3] | qs_1[0..3] | ... | qs_15[0..3] |   vector 0: k 0..3 (low nibbles), 16..19 (high)
//        | qs_0[4..7] | qs_1[4..7] | ... | qs_15[4..7] |   vector 1: k 4..7, 20..23
//        | qs_0[8..11]  ...                             |   vector 2: k 8..11, 24..27
//        | qs_0[12..15] ...                             |   vector 3: k 12..15, 28..31
//        | d_0 | d_1 | ... | d_15 |                        16 f16 scales (32 bytes)
//
//   Q4_1 (320 bytes): the same, then m_0 .. m_15 (32 bytes).
//   Q8_0 (544 bytes): 8 vectors, vector j = q_r[4j .. 4j + 3] of each row (k 4j .. 4j + 3), then
//                     d_0 .. d_15; with AVX-512 VNNI each code's top bit is flipped (u = q + 128,
//                     what vpdpbusd multiplies), with AVX2 the codes are the file's.
//   Q5_0 (352 bytes): Q4_0's 4 vectors, then 8 masks of 64 bits (64 bytes: the rows' qh), mask
//                     2v + h holding in bit 4r + i the fifth bit of row r's weight 16h + 4v + i,
//                     the code in nibble h of vector v's byte 4r + i; then d_0 .. d_15.
//   Q5_1 (384 bytes): Q5_0's, then m_0 .. m_15.
//
// note: why this layout. Decode reads every weight once, so the kernel must turn each byte it
// loads into products at once: one load gives 16 rows x 4 k, the two nibbles of 4-bit codes are
// one AND and one shift apart (k and k + 16, as the file pairs them, so packing only moves 4-byte
// pieces, never splits a byte; the shift is one GFNI affine map, or a shift and an AND without
// GFNI), Q8_0's codes are ready as they are, a mask of fifth bits is one masked add of 16, and
// the 16 rows' f16 scales sit in the 32 bytes after their codes, one vcvtph2ps (exact) from a
// vector of 16 scales. A tile reads each group front to back, block-group by block-group, one sequential
// stream per group, and a block-group's size is the file's 16 rows exactly (packed.h's contract).
// Prefill reads the same bytes: a tile of up to 4 activation rows (AVX-512) multiplies each loaded
// weight vector by each row's 4-byte broadcast.
// note: prefill (256 x 4864 x 896, one thread, CPU time) ran 5-10% slower than quant_gemm with the
// top bit flipped and the high nibbles shifted and masked in the tile, 5-10% faster done at packing
// and by GFNI; tiles of 8 rows x one group ran 10% slower than 4 rows x two groups.
//
// The arithmetic is quant_gemm.cpp's, per run (here a block of 32): S = sum u a - shift * sum a
// in int32, exact whatever the order of its additions; then acc = fma(float(S), d * dx, acc) and,
// for Q4_1 and Q5_1, acc = fma(m, cx, acc) (packed.h's -ml * cx, with ml = -m), in block order.
//   - AVX-512 VNNI: vpdpbusd multiplies unsigned codes by signed activations; Q8_0's stored codes
//     are u = q + 128, so S starts from -128 * sum a as for the other symmetric types.
//   - AVX2: vpmaddubsw adds pairs of products into int16, vpmaddwd by ones widens pairs of those
//     to int32. 4-bit codes sum all 8 steps of a block in int16 (16 products of at most
//     15 * 127 = 30480 < 32767) before widening, 5-bit codes 4 steps (8 products of at most
//     31 * 127 = 31496); a 32-bit half of a mask of fifth bits becomes 32 bytes of 16 or 0 by a
//     byte shuffle, an AND with each byte's bit and a compare. Q8_0's codes would reach 255 as
//     unsigned bytes, where a pair could saturate, so AVX2 keeps them signed (q) and multiplies
//     |q| by a with q's sign (vpsignb): |q| <= 128, |a| <= 127 (the quantizer's codes), a pair at
//     most 32512, widened at every step; S = sum q a directly.
#include "kernels/cpu/quant/packed_tile.h"

#include <cstring>

#include "core/quants.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace minfer::cpu::packed {

#if (defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)) || \
    (defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))

namespace {

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define MINFER_PACKED_VNNI 1
#endif

constexpr int kRows = 16;  // rows per group (packed.h's kPackRows)

// Whether Q8_0's codes are stored with their top bit flipped (u = q + 128, what vpdpbusd
// multiplies); AVX2's vpsignb reads q itself.
#if defined(MINFER_PACKED_VNNI)
constexpr bool kFlipQ8 = true;
#else
constexpr bool kFlipQ8 = false;
#endif

// Where each part of a block-group lies, per block type (the drawing at the top), and how far
// ahead of a group's stream its tile prefetches, in bytes (0: not at all).
// note: measured on the Xeon named in bench/results/NOTES.md (issue 57), decode of a 4864 x 896
// matrix from DRAM at one thread: prefetching 1 to 4 KiB ahead streams the 4-bit types 12-16%
// faster; Q8_0 ran 3% slower with it (CPU time of the thread, medians of 3 rounds). The AVX2
// build on the same Xeon: 17-18% faster for the 4-bit types. On an AVX2-only AMD Zen 3, Q8_0's
// AVX2 tile streamed 5-10% faster with 2 KiB (2 threads, Qwen2.5's MLP shapes), so only AVX2's
// Q8_0 prefetches.
#if defined(MINFER_PACKED_VNNI)
constexpr int kAheadQ8 = 0;
#else
constexpr int kAheadQ8 = 2048;
#endif
template <class Block> struct Layout;
template <> struct Layout<BlockQ8> {
  static constexpr int kVectors = 8, kAhead = kAheadQ8;
  static constexpr bool kNibbles = false, kFifth = false, kMin = false;
};
template <> struct Layout<BlockQ4_0> {
  [[maybe_unused]] static constexpr DType kType = DType::q4_0;  // AVX2's tile_for passes it to strip_rows
  static constexpr int kVectors = 4, kAhead = 2048;
  static constexpr bool kNibbles = true, kFifth = false, kMin = false;
};
template <> struct Layout<BlockQ4_1> {
  [[maybe_unused]] static constexpr DType kType = DType::q4_1;  // AVX2's tile_for passes it to strip_rows
  static constexpr int kVectors = 4, kAhead = 2048;
  static constexpr bool kNibbles = true, kFifth = false, kMin = true;
};
template <> struct Layout<BlockQ5_0> {
  [[maybe_unused]] static constexpr DType kType = DType::q5_0;  // AVX2's tile_for passes it to strip_rows
  static constexpr int kVectors = 4, kAhead = 2048;
  static constexpr bool kNibbles = true, kFifth = true, kMin = false;
};
template <> struct Layout<BlockQ5_1> {
  [[maybe_unused]] static constexpr DType kType = DType::q5_1;  // AVX2's tile_for passes it to strip_rows
  static constexpr int kVectors = 4, kAhead = 2048;
  static constexpr bool kNibbles = true, kFifth = true, kMin = true;
};

template <class Block>
struct Offsets {
  using L = Layout<Block>;
  static constexpr int kFifth = 64 * L::kVectors;                // the masks (Q5_0, Q5_1)
  static constexpr int kScale = kFifth + (L::kFifth ? 64 : 0);  // d_0 .. d_15
  static constexpr int kMin = kScale + 2 * kRows;               // m_0 .. m_15 (Q4_1, Q5_1)
  static constexpr int kBytes = kRows * int(sizeof(Block));
  static_assert(kMin + (L::kMin ? 2 * kRows : 0) == kBytes, "a block-group is its 16 rows' blocks exactly");
};

// The code bytes of a block: Q8_0's q, the others' qs.
[[maybe_unused]] inline const uint8_t* code_bytes(const BlockQ8& b) { return reinterpret_cast<const uint8_t*>(b.q); }
template <class Block>
const uint8_t* code_bytes(const Block& b) { return b.qs; }
inline uint8_t* code_bytes(BlockQ8& b) { return reinterpret_cast<uint8_t*>(b.q); }
template <class Block>
uint8_t* code_bytes(Block& b) { return b.qs; }

template <class Block>
void pack_group(uint8_t* dst, const uint8_t* src, int64_t row_bytes, int64_t nb) {
  using L = Layout<Block>;
  using O = Offsets<Block>;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* o = dst + b * O::kBytes;
    uint64_t masks[8] = {};
    for (int r = 0; r < kRows; ++r) {
      Block block;
      std::memcpy(&block, src + r * row_bytes + b * int64_t(sizeof(Block)), sizeof(Block));
      for (int v = 0; v < L::kVectors; ++v) std::memcpy(o + 64 * v + 4 * r, code_bytes(block) + 4 * v, 4);
      if constexpr (!L::kNibbles && kFlipQ8)
        for (int v = 0; v < L::kVectors; ++v)
          for (int i = 0; i < 4; ++i) o[64 * v + 4 * r + i] ^= 0x80;  // u = q + 128
      if constexpr (L::kFifth) {
        uint32_t qh;
        std::memcpy(&qh, block.qh, 4);
        for (int v = 0; v < 4; ++v)
          for (int h = 0; h < 2; ++h)
            for (int i = 0; i < 4; ++i) masks[2 * v + h] |= uint64_t((qh >> (16 * h + 4 * v + i)) & 1) << (4 * r + i);
      }
      std::memcpy(o + O::kScale + 2 * r, &block.d, 2);
      if constexpr (L::kMin) std::memcpy(o + O::kMin + 2 * r, &block.m, 2);
    }
    if constexpr (L::kFifth) std::memcpy(o + O::kFifth, masks, sizeof(masks));
  }
}

template <class Block>
void unpack_row(uint8_t* dst, const uint8_t* group, int r, int64_t nb) {
  using L = Layout<Block>;
  using O = Offsets<Block>;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* o = group + b * O::kBytes;
    Block block;
    for (int v = 0; v < L::kVectors; ++v) std::memcpy(code_bytes(block) + 4 * v, o + 64 * v + 4 * r, 4);
    if constexpr (!L::kNibbles && kFlipQ8)
      for (int i = 0; i < 4 * L::kVectors; ++i) code_bytes(block)[i] ^= 0x80;
    if constexpr (L::kFifth) {
      uint64_t masks[8];
      std::memcpy(masks, o + O::kFifth, sizeof(masks));
      uint32_t qh = 0;
      for (int v = 0; v < 4; ++v)
        for (int h = 0; h < 2; ++h)
          for (int i = 0; i < 4; ++i) qh |= uint32_t((masks[2 * v + h] >> (4 * r + i)) & 1) << (16 * h + 4 * v + i);
      std::memcpy(block.qh, &qh, 4);
    }
    std::memcpy(&block.d, o + O::kScale + 2 * r, 2);
    if constexpr (L::kMin) std::memcpy(&block.m, o + O::kMin + 2 * r, 2);
    std::memcpy(dst + b * int64_t(sizeof(Block)), &block, sizeof(Block));
  }
}

// 4 consecutive activation codes as one int32, for a broadcast.
inline int32_t four(const int8_t* x) {
  int32_t v;
  std::memcpy(&v, x, 4);
  return v;
}

#if defined(MINFER_PACKED_VNNI)
constexpr int kMaxRows = 4, kMaxGroups = 2;

// Rows [m, m + R) x the 16 * G rows of G groups: 2G x R int32 sums per block, R x G f32 sums.
template <class Block, int R, int G>
void tile(const Tile& t) {
  using L = Layout<Block>;
  using O = Offsets<Block>;
  constexpr bool kSymmetric = !L::kMin;
  const Activations& a = *t.a;
  const int64_t K = t.K, runs = a.runs;
  const int8_t* x = a.q + t.m * K;
  __m512 acc[R][G];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  const __m512i nibble = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
#if defined(__GFNI__)
  // Each byte shifted right by 4 in one instruction: GF(2)'s affine map whose matrix takes bit
  // i + 4 to bit i (row i of the matrix, for output bit i, is byte 7 - i of the qword).
  const __m512i high_nibble = _mm512_set1_epi64(0x1020408000000000LL);
#endif
  for (int64_t b = 0; b < runs; ++b) {
    const uint8_t* p[G];
    for (int g = 0; g < G; ++g) p[g] = t.w + g * t.group_bytes + b * O::kBytes;
    if (L::kAhead > 0 && t.m == 0)  // the first rows' tile streams the groups from memory
      for (int g = 0; g < G; ++g)
        for (int i = 0; i < O::kBytes; i += 64)
          _mm_prefetch(reinterpret_cast<const char*>(p[g] + L::kAhead + i), _MM_HINT_T0);
    __m512i sum[R][G];
    for (int r = 0; r < R; ++r)
      for (int g = 0; g < G; ++g)
        sum[r][g] = kSymmetric ? _mm512_set1_epi32(-a.shifted[(t.m + r) * runs + b]) : _mm512_setzero_si512();
    const int8_t* xb = x + 32 * b;
    if constexpr (!L::kNibbles) {
      for (int j = 0; j < L::kVectors; ++j) {
        __m512i w[G];
        for (int g = 0; g < G; ++g) w[g] = _mm512_loadu_si512(p[g] + 64 * j);
        for (int r = 0; r < R; ++r) {
          const __m512i bc = _mm512_set1_epi32(four(xb + r * K + 4 * j));
          for (int g = 0; g < G; ++g) sum[r][g] = _mm512_dpbusd_epi32(sum[r][g], w[g], bc);
        }
      }
    } else {
      for (int v = 0; v < 4; ++v) {
        __m512i lo[G], hi[G];
        for (int g = 0; g < G; ++g) {
          const __m512i raw = _mm512_loadu_si512(p[g] + 64 * v);
          lo[g] = _mm512_and_si512(raw, nibble);
#if defined(__GFNI__)
          hi[g] = _mm512_gf2p8affine_epi64_epi8(raw, high_nibble, 0);
#else
          hi[g] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble);
#endif
          if constexpr (L::kFifth) {
            uint64_t bits[2];
            std::memcpy(bits, p[g] + O::kFifth + 16 * v, 16);
            lo[g] = _mm512_mask_add_epi8(lo[g], _cvtu64_mask64(bits[0]), lo[g], sixteen);
            hi[g] = _mm512_mask_add_epi8(hi[g], _cvtu64_mask64(bits[1]), hi[g], sixteen);
          }
        }
        for (int r = 0; r < R; ++r) {
          const __m512i bl = _mm512_set1_epi32(four(xb + r * K + 4 * v));
          const __m512i bh = _mm512_set1_epi32(four(xb + r * K + 16 + 4 * v));
          for (int g = 0; g < G; ++g) {
            sum[r][g] = _mm512_dpbusd_epi32(sum[r][g], lo[g], bl);
            sum[r][g] = _mm512_dpbusd_epi32(sum[r][g], hi[g], bh);
          }
        }
      }
    }
    __m512 d[G];
    for (int g = 0; g < G; ++g)
      d[g] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[g] + O::kScale)));
    for (int r = 0; r < R; ++r) {
      const __m512 dx = _mm512_set1_ps(a.dx[(t.m + r) * runs + b]);
      for (int g = 0; g < G; ++g)
        acc[r][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[r][g]), _mm512_mul_ps(d[g], dx), acc[r][g]);
    }
    if constexpr (L::kMin) {
      __m512 mn[G];
      for (int g = 0; g < G; ++g)
        mn[g] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[g] + O::kMin)));
      for (int r = 0; r < R; ++r) {
        const __m512 cx = _mm512_set1_ps(a.cx[(t.m + r) * runs + b]);
        for (int g = 0; g < G; ++g) acc[r][g] = _mm512_fmadd_ps(mn[g], cx, acc[r][g]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) _mm512_storeu_ps(t.out + r * t.ld_out + kRows * g, acc[r][g]);
}

template <class Block, int R>
void tile_rows(const Tile& t) {
  if (t.groups == 2) return tile<Block, R, 2>(t);
  tile<Block, R, 1>(t);
}

template <class Block>
void tile_for(const Tile& t) {
  switch (t.rows) {
    case 4: return tile_rows<Block, 4>(t);
    case 3: return tile_rows<Block, 3>(t);
    case 2: return tile_rows<Block, 2>(t);
    default: return tile_rows<Block, 1>(t);
  }
}
#else  // AVX2
constexpr int kMaxRows = 1 << 30, kMaxGroups = 2;

// The 32 bits at p (bit j: byte j of a half vector) as 32 bytes: 16 where the bit is set, else 0.
inline __m256i fifth_bits(const uint8_t* p) {
  const __m256i byte_of_bit = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                               2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(four(reinterpret_cast<const int8_t*>(p))), byte_of_bit);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(16));
}

// Half h (rows 8h .. 8h + 7) of vector v of the block-group at p as unsigned codes: lo holds k 4v ..
// 4v + 3, hi k 16 + 4v .. 16 + 4v + 3, with their fifth bits for Q5_0 and Q5_1.
template <class Block>
inline void nibble_codes(const uint8_t* p, int v, int h, __m256i& lo, __m256i& hi) {
  using O = Offsets<Block>;
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * v + 32 * h));
  lo = _mm256_and_si256(raw, nibble);
  hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), nibble);
  if constexpr (Layout<Block>::kFifth) {
    lo = _mm256_or_si256(lo, fifth_bits(p + O::kFifth + 16 * v + 4 * h));
    hi = _mm256_or_si256(hi, fifth_bits(p + O::kFifth + 16 * v + 8 + 4 * h));
  }
}

// Rows [m, m + R) x one group's 16 rows, as two halves of 8 int32 / f32 lanes.
template <class Block, int R>
void tile(const Tile& t) {
  using L = Layout<Block>;
  using O = Offsets<Block>;
  const Activations& a = *t.a;
  const int64_t K = t.K, runs = a.runs;
  const int8_t* x = a.q + t.m * K;
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < runs; ++b) {
    const uint8_t* p = t.w + b * O::kBytes;
    if (L::kAhead > 0 && t.m == 0)
      for (int i = 0; i < O::kBytes; i += 64) _mm_prefetch(reinterpret_cast<const char*>(p + L::kAhead + i), _MM_HINT_T0);
    const int8_t* xb = x + 32 * b;
    __m256i sum[R][2];
    if constexpr (!L::kNibbles) {  // Q8_0: S = sum q a, widened at every step
      for (int r = 0; r < R; ++r) sum[r][0] = sum[r][1] = _mm256_setzero_si256();
      for (int j = 0; j < L::kVectors; ++j)
        for (int h = 0; h < 2; ++h) {
          const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * j + 32 * h));  // q
          const __m256i magnitude = _mm256_abs_epi8(w);
          for (int r = 0; r < R; ++r) {
            const __m256i signed_x = _mm256_sign_epi8(_mm256_set1_epi32(four(xb + r * K + 4 * j)), w);
            sum[r][h] = _mm256_add_epi32(sum[r][h], _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, signed_x), ones));
          }
        }
    } else {  // 4- and 5-bit codes: products summed per lane pair in int16, widened every kWiden vectors
      constexpr int kWiden = L::kFifth ? 2 : 4;
      for (int r = 0; r < R; ++r)
        for (int h = 0; h < 2; ++h)
          sum[r][h] = L::kMin ? _mm256_setzero_si256() : _mm256_set1_epi32(-a.shifted[(t.m + r) * runs + b]);
      __m256i pairs[R][2];
      for (int v = 0; v < 4; ++v) {
        if (v % kWiden == 0)
          for (int r = 0; r < R; ++r) pairs[r][0] = pairs[r][1] = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
          __m256i lo, hi;
          nibble_codes<Block>(p, v, h, lo, hi);
          for (int r = 0; r < R; ++r) {
            const __m256i bl = _mm256_set1_epi32(four(xb + r * K + 4 * v));
            const __m256i bh = _mm256_set1_epi32(four(xb + r * K + 16 + 4 * v));
            pairs[r][h] = _mm256_add_epi16(pairs[r][h], _mm256_maddubs_epi16(lo, bl));
            pairs[r][h] = _mm256_add_epi16(pairs[r][h], _mm256_maddubs_epi16(hi, bh));
          }
        }
        if ((v + 1) % kWiden == 0)
          for (int r = 0; r < R; ++r)
            for (int h = 0; h < 2; ++h) sum[r][h] = _mm256_add_epi32(sum[r][h], _mm256_madd_epi16(pairs[r][h], ones));
      }
    }
    for (int h = 0; h < 2; ++h) {
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + O::kScale + 16 * h)));
      for (int r = 0; r < R; ++r) {
        const __m256 dx = _mm256_set1_ps(a.dx[(t.m + r) * runs + b]);
        acc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[r][h]), _mm256_mul_ps(d, dx), acc[r][h]);
      }
      if constexpr (L::kMin) {
        const __m256 mn = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + O::kMin + 16 * h)));
        for (int r = 0; r < R; ++r)
          acc[r][h] = _mm256_fmadd_ps(mn, _mm256_set1_ps(a.cx[(t.m + r) * runs + b]), acc[r][h]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(t.out + r * t.ld_out, acc[r][0]);
    _mm256_storeu_ps(t.out + r * t.ld_out + 8, acc[r][1]);
  }
}

// One group's codes and maps as columns 16n .. 16n + 15 of quant_gemm's strip (packed_tile.h): the
// 4- and 5-bit types, whose codes quant_gemm's AVX2 tile takes (Q8_0's would saturate it).
template <class Block>
void unpack_to_strip(const uint8_t* group, int64_t K, int n, const QuantStrip& s) {
  using L = Layout<Block>;
  using O = Offsets<Block>;
  constexpr int kCols = kQuantStripCols;
  for (int64_t b = 0; b < K / 32; ++b) {
    const uint8_t* p = group + b * O::kBytes;
    for (int v = 0; v < 4; ++v)
      for (int h = 0; h < 2; ++h) {
        __m256i lo, hi;
        nibble_codes<Block>(p, v, h, lo, hi);
        // quads v (k 4v .. 4v + 3) and 4 + v (k 16 + 4v ..) of run b; rows 8h .. 8h + 7
        _mm256_store_si256(reinterpret_cast<__m256i*>(s.codes + ((b * 8 + v) * kCols + 16 * n + 8 * h) * 4), lo);
        _mm256_store_si256(reinterpret_cast<__m256i*>(s.codes + ((b * 8 + 4 + v) * kCols + 16 * n + 8 * h) * 4), hi);
      }
    for (int h = 0; h < 2; ++h) {
      const int64_t at = b * kCols + 16 * n + 8 * h;
      _mm256_store_ps(s.scale + at, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + O::kScale + 16 * h))));
      if constexpr (L::kMin)  // ml = -m, its sign flipped (the tile's fma(m, cx) is quant_gemm's fnmadd(ml, cx))
        _mm256_store_ps(s.minimum + at, _mm256_xor_ps(_mm256_set1_ps(-0.0f), _mm256_cvtph_ps(_mm_loadu_si128(
                                                          reinterpret_cast<const __m128i*>(p + O::kMin + 16 * h)))));
    }
  }
}

// note: a tile takes all of a call's rows (max_rows is unbounded) and two groups: up to
// kDirectRows rows, and always for Q8_0, 2 rows of one group at a time in registers; from
// kDirectRows + 1 rows the 4- and 5-bit types unpack the groups once into quant_gemm's strip and
// run its tiles (strip_rows), as the K-quants do: in registers, Q5_0's fifth bits were spread
// again for every 2 rows, and its prefill (256 rows) ran at 0.76x quant_gemm's on the file's rows
// (Zen 3). Two groups fill the strip's 32 columns, so that the activations are read once per 32
// weight rows, as quant_gemm reads them. Both paths give each element the same operations.
constexpr int kDirectRows = 8;

template <class Block>
void tile_for(const Tile& t) {
  if constexpr (Layout<Block>::kNibbles)
    if (t.rows > kDirectRows) return strip_rows(t, Layout<Block>::kType, unpack_to_strip<Block>);
  rows_in_pairs<tile<Block, 2>, tile<Block, 1>>(t);
}
#endif

template <class Block>
constexpr TypeKernels kernels_of() {
  return {pack_group<Block>, unpack_row<Block>, tile_for<Block>, kMaxRows, kMaxGroups};
}

constexpr TypeKernels kQ8_0 = kernels_of<BlockQ8>(), kQ4_0 = kernels_of<BlockQ4_0>(), kQ4_1 = kernels_of<BlockQ4_1>();
constexpr TypeKernels kQ5_0 = kernels_of<BlockQ5_0>(), kQ5_1 = kernels_of<BlockQ5_1>();

}  // namespace

const TypeKernels* legacy_kernels(DType t) {
  switch (t) {
    case DType::q8_0: return &kQ8_0;
    case DType::q4_0: return &kQ4_0;
    case DType::q4_1: return &kQ4_1;
    case DType::q5_0: return &kQ5_0;
    case DType::q5_1: return &kQ5_1;
    default: return nullptr;
  }
}

#else

// No AVX2 (or no FMA and F16C): no packed layout; matmul_quant.cpp takes the dot products.
const TypeKernels* legacy_kernels(DType) { return nullptr; }

#endif

}  // namespace minfer::cpu::packed
