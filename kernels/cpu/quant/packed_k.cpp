// The packed layout of the K-quants (kernels/cpu/quant/packed.h): Q2_K, Q3_K, Q4_K, Q5_K and Q6_K
// in groups of 16 rows, and the register tiles that multiply them, VNNI's vpdpbusd or AVX2's
// vpmaddubsw, with quant_gemm.cpp's arithmetic (its header has the terms).
//
// A group is nb packed super-blocks in order; packed super-block b is super-block b of the 16 rows
// (16 x the file's block bytes), so a tile streams a group front to back. Within one, the 16 rows
// sit side by side: every scale as a column of 16 (16 f16, or 16 bytes: byte j of the file's
// scales, rows 0..15), and the codes in 64-byte vectors of 16 rows x 4 consecutive k, the order
// vpdpbusd multiplies them in (AVX2 reads each as rows 0..7, then rows 8..15):
//
//     byte:  0  1  2  3 | 4  5  6  7 | ...  | 60 61 62 63
//            row 0      | row 1      |      | row 15         each byte: k0+i (i = 0..3) of a quad
//
// The codes stay as narrow as the file's: a 4-bit code is a nibble, so a vector holds two quads
// (low nibbles one, high nibbles the next); the 2 top bits of Q6_K, the 2 low bits of Q2_K and
// Q3_K, and the 1-bit fields (Q5_K's 5th bit, Q3_K's high bit) hold 4 or 8 quads, bits 2t, 2t + 1
// or bit t of each byte being quad t's. Per packed super-block (offsets in bytes):
//
//   Q4_K (2304 = 16 x 144)          Q5_K (2816 = 16 x 176)          Q6_K (3360 = 16 x 210)
//     0  d    [16] f16                0  d, 32 dmin, 64 scales        0  d [16] f16
//    32  dmin [16] f16                  as Q4_K                      32  scales [16 runs][16 rows] int8
//    64  scales [12][16 rows]       256  nibbles as Q4_K            288  per run s of 16 k (192 each):
//   256  per run c of 32 k:        2304  per run c: [64] 5th bits          [64] nibbles, quads 0 | 1
//        [4 vectors][64] nibbles,        bit q = quad q of the run         [64] nibbles, quads 2 | 3
//        vector v: quads 2v | 2v+1                                         [64] top 2 bits, quads 0..3
//
//   Q3_K (1760 = 16 x 110)                           Q2_K (1344 = 16 x 84)
//     0  d [16] f16                                    0  d, 32 dmin [16] f16
//    32  scales [12][16 rows]                         64  scales [16 runs][16 rows]
//   224  per pair c of runs of 16 k (192 each):      320  per run s: [64] low 2 bits, quads 0..3
//        [64] low 2 bits of run 2c, quads 0..3
//        [64] low 2 bits of run 2c + 1
//        [64] high bits: bit 4e + t = quad t of run 2c + e
//
// note: why this layout. Decode streams a matrix once per token, so the packed bytes must be no
// more than the file's (the same count, in fact: packed.h's contract), and each byte must be used
// for 1 activation row as for 4: the kernel unpacks a code vector once per tile with two or three
// byte operations (mask a nibble, shift a field to its place) and feeds every row from it. The
// 16 rows of a vector are 16 int32 lanes of vpdpbusd, so each run's sum comes out as one vector of
// 16 output columns, scaled by a vector of 16 dl and ml: that is why the scales are transposed,
// so that the 16 rows' sc and m of a run come out of one 16-byte load and a few byte operations
// (vcvtph2ps turns the 16 f16 d exactly into f32). dl = d * float(sc) and ml = dmin * float(m)
// are the f32 products unpack::k_affine forms, and each output element then takes quant_gemm's
// run-order operations (packed.h), whatever the tile's rows and groups, so it is quant_gemm's
// result bit for bit. Scalar builds do not pack the K-quants (k_kernels returns nullptr).
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/quants.h"
#include "kernels/cpu/quant/act_runs.h"
#include "kernels/cpu/quant/packed.h"
#include "kernels/cpu/quant/packed_tile.h"
#include "kernels/cpu/quant/quant_gemm.h"
#include "kernels/cpu/quant/quant_simd.h"

namespace minfer::cpu::packed {

// The ISA choice is quant_gemm.cpp's (act_runs.h), whose arithmetic the tiles reproduce.
#if defined(MINFER_QUANT_GEMM_VNNI) || defined(MINFER_QUANT_GEMM_AVX2)

namespace {

// f(std::integral_constant<int, 0>{}) .. f(<N - 1>): loops whose index picks shift counts and
// offsets at compile time.
template <class F, int... I>
inline void static_for_impl(F& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
inline void static_for(F&& f) {
  static_for_impl(f, std::make_integer_sequence<int, N>{});
}

// A bit field of the codes: where the bits of weight k sit in a file block and in a packed
// super-block (row r), and how wide it is.
struct Place {
  int byte, shift;
};

// Plain bytes moved as they are: `count` bytes at `file` in a block go to the packed super-block
// in columns of 16 rows of `unit` bytes (a scale of 2 bytes, or 1): byte i of row r at
// packed + 16 * unit * (i / unit) + unit * r + i % unit.
struct Plain {
  int file, count, packed, unit;
};

// --- the five layouts (see the top); each type: its block, its runs, its plain bytes, its code
// fields, and its per-run pieces for the tiles: the 16 rows' sc and m as bytes, and a pair of
// quads (2p, 2p + 1) of run j as unsigned codes ---

inline __m128i load16(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline __m128i bytes16(int c) { return _mm_set1_epi8(static_cast<char>(c)); }

// Bits moved by n (left if n > 0) within 16-bit lanes; the caller masks what crossed a byte.
template <int n, class V>
inline typename V::I shift(typename V::I x) {
  if constexpr (n > 0) return V::sll(x, n);
  else if constexpr (n < 0) return V::srl(x, -n);
  else return x;
}
template <int n>
inline __m128i shift16(__m128i x) {
  if constexpr (n > 0) return _mm_slli_epi16(x, n);
  else if constexpr (n < 0) return _mm_srli_epi16(x, -n);
  else return x;
}

struct Q4K {
  using Block = BlockQ4_K;
  static constexpr DType kType = DType::q4_k;
  static constexpr int kRun = 32, kShift = 0, kSuper = 2304;
  [[maybe_unused]] static constexpr int kSteps = 8;  // kSteps: AVX2's int16 quads
  static constexpr bool kMin = true, kSigned = false;
  static constexpr int kScales = 64, kCodes = 256;
  static constexpr Plain kPlain[] = {{offsetof(Block, d), 2, 0, 2}, {offsetof(Block, dmin), 2, 32, 2},
                                     {offsetof(Block, scales), 12, kScales, 1}};
  static constexpr int kFields = 1;
  static constexpr int width(int) { return 4; }
  static Place file(int, int k) { return {int(offsetof(Block, qs)) + 32 * (k / 64) + k % 32, 4 * (k / 32 % 2)}; }
  static Place packed(int, int r, int k) {
    return {kCodes + (4 * (k / 32) + k % 32 / 8) * 64 + 4 * r + k % 4, 4 * (k % 8 / 4)};
  }
  template <int j>
  static void affine(const uint8_t* sb, __m128i& sc, __m128i& m) {  // k_scale_min of the 16 rows
    auto s = [&](int i) { return load16(sb + kScales + 16 * i); };
    if constexpr (j < 4) {
      sc = _mm_and_si128(s(j), bytes16(63));
      m = _mm_and_si128(s(j + 4), bytes16(63));
    } else {
      sc = _mm_or_si128(_mm_and_si128(s(j + 4), bytes16(0x0F)), _mm_and_si128(_mm_srli_epi16(s(j - 4), 2), bytes16(0x30)));
      m = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(s(j + 4), 4), bytes16(0x0F)),
                       _mm_and_si128(_mm_srli_epi16(s(j), 2), bytes16(0x30)));
    }
  }
  template <class V, int j, int p>
  static void quads(const uint8_t* sb, int half, typename V::I& u0, typename V::I& u1) {
    const auto w = V::load(sb + kCodes + (4 * j + p) * 64 + half);
    u0 = V::and_(w, V::bytes(0x0F));
    u1 = V::and_(V::srl(w, 4), V::bytes(0x0F));
  }
};

struct Q5K {
  using Block = BlockQ5_K;
  static constexpr DType kType = DType::q5_k;
  static constexpr int kRun = 32, kShift = 0, kSuper = 2816;
  [[maybe_unused]] static constexpr int kSteps = 4;
  static constexpr bool kMin = true, kSigned = false;
  static constexpr int kScales = 64, kFifth = 2304;
  [[maybe_unused]] static constexpr int kCodes = 256;
  static constexpr Plain kPlain[] = {{offsetof(Block, d), 2, 0, 2}, {offsetof(Block, dmin), 2, 32, 2},
                                     {offsetof(Block, scales), 12, kScales, 1}};
  static constexpr int kFields = 2;  // the low 4 bits, the 5th
  static constexpr int width(int f) { return f == 0 ? 4 : 1; }
  static Place file(int f, int k) {
    if (f == 0) return {int(offsetof(Block, qs)) + 32 * (k / 64) + k % 32, 4 * (k / 32 % 2)};
    return {int(offsetof(Block, qh)) + k % 32, k / 32};
  }
  static Place packed(int f, int r, int k) {
    if (f == 0) return Q4K::packed(0, r, k);
    return {kFifth + k / 32 * 64 + 4 * r + k % 4, k % 32 / 4};
  }
  template <int j>
  static void affine(const uint8_t* sb, __m128i& sc, __m128i& m) { Q4K::affine<j>(sb, sc, m); }
  template <class V, int j, int p>
  static void quads(const uint8_t* sb, int half, typename V::I& u0, typename V::I& u1) {
    Q4K::quads<V, j, p>(sb, half, u0, u1);
    const auto h = V::load(sb + kFifth + 64 * j + half);
    u0 = V::or_(u0, V::and_(shift<4 - 2 * p, V>(h), V::bytes(0x10)));
    u1 = V::or_(u1, V::and_(shift<3 - 2 * p, V>(h), V::bytes(0x10)));
  }
};

struct Q6K {
  using Block = BlockQ6_K;
  static constexpr DType kType = DType::q6_k;
  static constexpr int kRun = 16, kShift = 32, kSuper = 3360;
  [[maybe_unused]] static constexpr int kSteps = 2;
  static constexpr bool kMin = false, kSigned = true;
  static constexpr int kScales = 32, kCodes = 288;
  static constexpr Plain kPlain[] = {{offsetof(Block, d), 2, 0, 2}, {offsetof(Block, scales), 16, kScales, 1}};
  static constexpr int kFields = 2;  // the low 4 bits, the top 2
  static constexpr int width(int f) { return f == 0 ? 4 : 2; }
  static Place file(int f, int k) {
    const int h = k / 128, e = k % 128;
    if (f == 0) return {int(offsetof(Block, ql)) + 64 * h + e % 64, 4 * (e / 64)};
    return {int(offsetof(Block, qh)) + 32 * h + e % 32, 2 * (e / 32)};
  }
  static Place packed(int f, int r, int k) {
    const int run = kCodes + k / 16 * 192, e = k % 16;
    if (f == 0) return {run + e / 8 * 64 + 4 * r + e % 4, 4 * (e % 8 / 4)};
    return {run + 128 + 4 * r + e % 4, 2 * (e / 4)};
  }
  template <int j>
  static void affine(const uint8_t* sb, __m128i& sc, __m128i&) { sc = load16(sb + kScales + 16 * j); }
  // note: the top bits of quads 0 and 2 (bits 0, 1, 4, 5) and of quads 1 and 3 (2, 3, 6, 7) are
  // masked apart first, so that each quad's shifted top bits have zeros above bits 4, 5 and one
  // bit select (one vpternlog on AVX-512) joins them to the nibble: 11 operations a run where
  // masking each quad took 18.
  template <class V, int j, int p>
  static void quads(const uint8_t* sb, int half, typename V::I& u0, typename V::I& u1) {
    const uint8_t* run = sb + kCodes + 192 * j + half;
    const auto n = V::load(run + 64 * p), top = V::load(run + 128);
    const auto even = V::and_(top, V::bytes(0x33)), odd = V::and_(top, V::bytes(0xCC));
    u0 = V::select_low_nibble(n, shift<4 - 4 * p, V>(even));
    u1 = V::select_low_nibble(V::srl(n, 4), shift<2 - 4 * p, V>(odd));
  }
};

struct Q3K {
  using Block = BlockQ3_K;
  static constexpr DType kType = DType::q3_k;
  static constexpr int kRun = 16, kShift = 4, kSuper = 1760;
  [[maybe_unused]] static constexpr int kSteps = 4;
  static constexpr bool kMin = false, kSigned = true;
  static constexpr int kScales = 32, kCodes = 224;
  static constexpr Plain kPlain[] = {{offsetof(Block, d), 2, 0, 2}, {offsetof(Block, scales), 12, kScales, 1}};
  static constexpr int kFields = 2;  // the low 2 bits, the high bit
  static constexpr int width(int f) { return f == 0 ? 2 : 1; }
  static Place file(int f, int k) {
    if (f == 0) return {int(offsetof(Block, qs)) + 32 * (k / 128) + k % 32, 2 * (k % 128 / 32)};
    return {int(offsetof(Block, hmask)) + k % 32, k / 32};
  }
  static Place packed(int f, int r, int k) {
    const int pair = kCodes + k / 32 * 192, e = k % 32 / 16, t = k % 16 / 4;
    if (f == 0) return {pair + 64 * e + 4 * r + k % 4, 2 * t};
    return {pair + 128 + 4 * r + k % 4, 4 * e + t};
  }
  template <int j>
  static void affine(const uint8_t* sb, __m128i& sc, __m128i&) {  // q3_k_scale of the 16 rows
    auto s = [&](int i) { return load16(sb + kScales + 16 * i); };
    const __m128i low = j < 8 ? _mm_and_si128(s(j % 8), bytes16(0x0F))
                              : _mm_and_si128(_mm_srli_epi16(s(j % 8), 4), bytes16(0x0F));
    const __m128i high = _mm_and_si128(shift16<4 - 2 * (j / 4)>(s(8 + j % 4)), bytes16(0x30));
    sc = _mm_sub_epi8(_mm_or_si128(low, high), bytes16(32));
  }
  template <class V, int j, int p>
  static void quads(const uint8_t* sb, int half, typename V::I& u0, typename V::I& u1) {
    const uint8_t* pair = sb + kCodes + 192 * (j / 2) + half;
    const auto low = V::load(pair + 64 * (j % 2)), high = V::load(pair + 128);
    constexpr int t = 2 * p, e = j % 2;
    u0 = V::or_(V::and_(shift<-2 * t, V>(low), V::bytes(3)), V::and_(shift<2 - 4 * e - t, V>(high), V::bytes(4)));
    u1 = V::or_(V::and_(shift<-2 * t - 2, V>(low), V::bytes(3)), V::and_(shift<1 - 4 * e - t, V>(high), V::bytes(4)));
  }
};

struct Q2K {
  using Block = BlockQ2_K;
  static constexpr DType kType = DType::q2_k;
  static constexpr int kRun = 16, kShift = 0, kSuper = 1344;
  [[maybe_unused]] static constexpr int kSteps = 4;
  static constexpr bool kMin = true, kSigned = false;
  static constexpr int kScales = 64, kCodes = 320;
  static constexpr Plain kPlain[] = {{offsetof(Block, d), 2, 0, 2}, {offsetof(Block, dmin), 2, 32, 2},
                                     {offsetof(Block, scales), 16, kScales, 1}};
  static constexpr int kFields = 1;
  static constexpr int width(int) { return 2; }
  static Place file(int, int k) { return {int(offsetof(Block, qs)) + 32 * (k / 128) + k % 32, 2 * (k % 128 / 32)}; }
  static Place packed(int, int r, int k) { return {kCodes + k / 16 * 64 + 4 * r + k % 4, 2 * (k % 16 / 4)}; }
  template <int j>
  static void affine(const uint8_t* sb, __m128i& sc, __m128i& m) {
    const __m128i s = load16(sb + kScales + 16 * j);
    sc = _mm_and_si128(s, bytes16(0x0F));
    m = _mm_and_si128(_mm_srli_epi16(s, 4), bytes16(0x0F));
  }
  template <class V, int j, int p>
  static void quads(const uint8_t* sb, int half, typename V::I& u0, typename V::I& u1) {
    const auto low = V::load(sb + kCodes + 64 * j + half);
    u0 = V::and_(shift<-4 * p, V>(low), V::bytes(3));
    u1 = V::and_(shift<-4 * p - 2, V>(low), V::bytes(3));
  }
};

// --- packing: the plain bytes, and every code field a quad at a time ---
// note: a field's 4 codes of a quad (k = 4q .. 4q + 3) sit in 4 consecutive bytes at one shift,
// in the file and packed alike (each type's file() and packed() above), so a quad moves as one
// 32-bit word: shifted down, masked to the field's width in every byte (bits shifted in from the
// next byte lie above it), shifted to its place: 64 word operations a field and row of a
// super-block, where a weight at a time took 256 byte operations.

inline uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline void or32(uint8_t* p, uint32_t v) {
  v |= load32(p);
  std::memcpy(p, &v, 4);
}

// One quad of a field `width` bits wide: the 4 bytes at from + from_place.byte, shifted down by
// from_place.shift and masked, ORed into the 4 bytes at to + to_place.byte at to_place.shift.
inline void move_quad(uint8_t* to, Place to_place, const uint8_t* from, Place from_place, int width) {
  const uint32_t mask = ((1u << width) - 1) * 0x01010101u;
  or32(to + to_place.byte, ((load32(from + from_place.byte) >> from_place.shift) & mask) << to_place.shift);
}

template <class T>
void pack_group(uint8_t* dst, const uint8_t* src, int64_t row_bytes, int64_t nb) {
  using Block = typename T::Block;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* sb = dst + b * T::kSuper;
    std::memset(sb, 0, T::kSuper);
    for (int r = 0; r < int(kPackRows); ++r) {
      const uint8_t* x = src + r * row_bytes + b * int64_t(sizeof(Block));
      for (const Plain& p : T::kPlain)
        for (int i = 0; i < p.count; ++i) sb[p.packed + 16 * p.unit * (i / p.unit) + p.unit * r + i % p.unit] = x[p.file + i];
      for (int f = 0; f < T::kFields; ++f)
        for (int k = 0; k < kQK; k += 4) move_quad(sb, T::packed(f, r, k), x, T::file(f, k), T::width(f));
    }
  }
}

template <class T>
void unpack_row(uint8_t* dst, const uint8_t* group, int r, int64_t nb) {
  using Block = typename T::Block;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* sb = group + b * T::kSuper;
    uint8_t* x = dst + b * int64_t(sizeof(Block));
    std::memset(x, 0, sizeof(Block));
    for (const Plain& p : T::kPlain)
      for (int i = 0; i < p.count; ++i) x[p.file + i] = sb[p.packed + 16 * p.unit * (i / p.unit) + p.unit * r + i % p.unit];
    for (int f = 0; f < T::kFields; ++f)
      for (int k = 0; k < kQK; k += 4) move_quad(x, T::file(f, k), sb, T::packed(f, r, k), T::width(f));
  }
}

constexpr int kAhead = 4096;  // bytes a group is prefetched ahead of its tile, as decode's dot products do

inline int32_t four_codes(const int8_t* x) {
  int32_t four;
  std::memcpy(&four, x, 4);
  return four;
}

#if defined(MINFER_QUANT_GEMM_VNNI)

struct V512 {
  using I = __m512i;
  static I load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static I bytes(int c) { return _mm512_set1_epi8(static_cast<char>(c)); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_(I a, I b) { return _mm512_or_si512(a, b); }
  static I sll(I a, int n) { return _mm512_slli_epi16(a, unsigned(n)); }
  static I srl(I a, int n) { return _mm512_srli_epi16(a, unsigned(n)); }
  // The low nibble of each byte of a, the high one of b.
  static I select_low_nibble(I a, I b) { return _mm512_ternarylogic_epi32(bytes(0x0F), a, b, 0xCA); }
};

// 16 bytes of scales (signed or not) as 16 f32.
template <bool kSigned>
inline __m512 scale_f32(__m128i s) {
  return _mm512_cvtepi32_ps(kSigned ? _mm512_cvtepi8_epi32(s) : _mm512_cvtepu8_epi32(s));
}

// Activation rows [m, m + R) x the 16 * NG rows of NG groups: per run, the int32 sums of 16
// columns per group from vpdpbusd, then dl * dx and ml * cx into the f32 sums, as quant_gemm's tile.
// Q4_K and Q5_K: the 16 rows' sc and m of the 8 runs, (8, 16) bytes each, from the scale columns
// at `scales` (12 x 16 bytes): k_scale_min in three 64-byte vectors, once per super-block.
inline void k_scale_min_columns(const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  const __m512i s0 = _mm512_loadu_si512(scales), s1 = _mm512_loadu_si512(scales + 64),
                s2 = _mm512_loadu_si512(scales + 128);
  const __m512i six = V512::bytes(63), low = V512::bytes(0x0F), top = V512::bytes(0x30);
  _mm512_storeu_si512(sc, _mm512_and_si512(s0, six));
  _mm512_storeu_si512(m, _mm512_and_si512(s1, six));
  _mm512_storeu_si512(sc + 64, _mm512_or_si512(_mm512_and_si512(s2, low), _mm512_and_si512(V512::srl(s0, 2), top)));
  _mm512_storeu_si512(m + 64, _mm512_or_si512(_mm512_and_si512(V512::srl(s2, 4), low), _mm512_and_si512(V512::srl(s1, 2), top)));
}

// Activation rows [m, m + R) x the 16 * NG rows of NG groups: per run, the int32 sums of 16
// columns per group from vpdpbusd, then dl * dx and ml * cx into the f32 sums, as quant_gemm's tile.
template <class T, int R, int NG>
void tile(const Tile& t) {
  constexpr int kRuns = kQK / T::kRun;
  constexpr bool kColumns = std::is_same_v<T, Q4K> || std::is_same_v<T, Q5K>;  // k_scale_min_columns
  const Activations& a = *t.a;
  const int8_t* x[R];
  const float *dx[R], *cx[R];
  const int32_t* shifted[R];
  for (int r = 0; r < R; ++r) {
    x[r] = a.q + (t.m + r) * t.K;
    dx[r] = a.dx + (t.m + r) * a.runs;
    cx[r] = a.cx + (t.m + r) * a.runs;
    shifted[r] = a.shifted + (t.m + r) * a.runs;
  }
  __m512 acc[R][NG];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NG; ++n) acc[r][n] = _mm512_setzero_ps();
  alignas(64) uint8_t sc_bytes[NG][kColumns ? 2 * kRuns * 16 : 1];
  for (int64_t b = 0; b < t.K / kQK; ++b) {
    const uint8_t* sb[NG];
    __m512 d[NG], dmin[NG];
    for (int n = 0; n < NG; ++n) {
      sb[n] = t.w + n * t.group_bytes + b * T::kSuper;
      d[n] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb[n])));
      if constexpr (T::kMin) dmin[n] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb[n] + 32)));
      if constexpr (kColumns) k_scale_min_columns(sb[n] + T::kScales, sc_bytes[n], sc_bytes[n] + kRuns * 16);
    }
    static_for<kRuns>([&](auto J) {
      constexpr int j = J;
      const int64_t g = b * kRuns + j;
      // note: the group's lines kAhead bytes on are prefetched a run's share at a time (a burst of
      // a whole super-block's fills the line buffers); only the first rows' tile streams the group
      // from memory, later ones find it cached.
      constexpr int kLines = (T::kSuper + 63) / 64;
      if (t.m == 0)
        for (int n = 0; n < NG; ++n)
          for (int i = j * kLines / kRuns; i < (j + 1) * kLines / kRuns; ++i)
            _mm_prefetch(reinterpret_cast<const char*>(sb[n] + kAhead + 64 * i), _MM_HINT_T0);
      __m512i sum[R][NG];
      for (int r = 0; r < R; ++r)
        for (int n = 0; n < NG; ++n) sum[r][n] = _mm512_setzero_si512();
      static_for<T::kRun / 8>([&](auto P) {
        constexpr int p = P;
        for (int n = 0; n < NG; ++n) {
          __m512i u0, u1;
          T::template quads<V512, j, p>(sb[n], 0, u0, u1);
          for (int r = 0; r < R; ++r) {
            const int8_t* xq = x[r] + g * T::kRun + 8 * p;
            sum[r][n] = _mm512_dpbusd_epi32(sum[r][n], u0, _mm512_set1_epi32(four_codes(xq)));
            sum[r][n] = _mm512_dpbusd_epi32(sum[r][n], u1, _mm512_set1_epi32(four_codes(xq + 4)));
          }
        }
      });
      for (int n = 0; n < NG; ++n) {
        __m128i sc, m;
        if constexpr (kColumns) {
          sc = load16(sc_bytes[n] + 16 * j);
          m = load16(sc_bytes[n] + kRuns * 16 + 16 * j);
        } else {
          T::template affine<j>(sb[n], sc, m);
        }
        const __m512 dl = _mm512_mul_ps(d[n], scale_f32<T::kSigned>(sc));
        for (int r = 0; r < R; ++r) {
          // S - shift * sum(a): exact in int32, whether subtracted first or last.
          if constexpr (T::kShift != 0) sum[r][n] = _mm512_sub_epi32(sum[r][n], _mm512_set1_epi32(shifted[r][g]));
          acc[r][n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[r][n]), _mm512_mul_ps(dl, _mm512_set1_ps(dx[r][g])), acc[r][n]);
        }
        if constexpr (T::kMin) {
          const __m512 ml = _mm512_mul_ps(dmin[n], scale_f32<false>(m));
          for (int r = 0; r < R; ++r) acc[r][n] = _mm512_fnmadd_ps(ml, _mm512_set1_ps(cx[r][g]), acc[r][n]);
        }
      }
    });
  }
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NG; ++n) _mm512_storeu_ps(t.out + r * t.ld_out + 16 * n, acc[r][n]);
}

// One group's codes as columns 16n .. 16n + 15 of quant_gemm's strip (quant_gemm.h), with its
// runs' dl and ml: unpacked once for a tile of many rows.
template <class T>
void unpack_to_strip(const uint8_t* group, int64_t K, int n, const QuantStrip& s) {
  constexpr int kRuns = kQK / T::kRun, kQuads = T::kRun / 4, kCols = kQuantStripCols;
  for (int64_t b = 0; b < K / kQK; ++b) {
    const uint8_t* sb = group + b * T::kSuper;
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb)));
    static_for<kRuns>([&](auto J) {
      constexpr int j = J;
      const int64_t g = b * kRuns + j;
      static_for<T::kRun / 8>([&](auto P) {
        __m512i u0, u1;
        T::template quads<V512, j, P>(sb, 0, u0, u1);
        _mm512_store_si512(s.codes + ((g * kQuads + 2 * P) * kCols + 16 * n) * 4, u0);
        _mm512_store_si512(s.codes + ((g * kQuads + 2 * P + 1) * kCols + 16 * n) * 4, u1);
      });
      __m128i sc, m;
      T::template affine<j>(sb, sc, m);
      _mm512_store_ps(s.scale + g * kCols + 16 * n, _mm512_mul_ps(d, scale_f32<T::kSigned>(sc)));
      if constexpr (T::kMin) {
        const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 32)));
        _mm512_store_ps(s.minimum + g * kCols + 16 * n, _mm512_mul_ps(dmin, scale_f32<false>(m)));
      }
    });
  }
}

// A tile of up to kDirectRows rows, unpacked in registers (see the note above tile_for).
constexpr int kDirectRows = 8;

template <class T, int R>
void tile_rows(const Tile& t) {
  if constexpr (R > 1)
    if (t.rows < R) return tile_rows<T, R - 1>(t);
  if (t.groups == 1) return tile<T, R, 1>(t);
  if constexpr (R <= 4) {
    tile<T, R, 2>(t);
  } else {
    Tile one = t;
    one.groups = 1;
    tile<T, R, 1>(one);
    one.w += t.group_bytes;
    one.out += kPackRows;
    tile<T, R, 1>(one);
  }
}

template <class T>
void direct_rows(const Tile& t) { tile_rows<T, kDirectRows>(t); }

#else  // AVX2

struct V256 {
  using I = __m256i;
  static I load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static I bytes(int c) { return _mm256_set1_epi8(static_cast<char>(c)); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I or_(I a, I b) { return _mm256_or_si256(a, b); }
  static I sll(I a, int n) { return _mm256_slli_epi16(a, n); }
  static I srl(I a, int n) { return _mm256_srli_epi16(a, n); }
  // The low nibble of each byte of a, the high one of b.
  static I select_low_nibble(I a, I b) {
    return _mm256_or_si256(_mm256_and_si256(a, bytes(0x0F)), _mm256_andnot_si256(bytes(0x0F), b));
  }
};

// Bytes 8h .. 8h + 7 of 16 bytes of scales (signed or not) as 8 f32.
template <bool kSigned>
inline __m256 scale_f32(__m128i s, int h) {
  const __m128i half = h == 0 ? s : _mm_srli_si128(s, 8);
  return _mm256_cvtepi32_ps(kSigned ? _mm256_cvtepi8_epi32(half) : _mm256_cvtepu8_epi32(half));
}

// Activation rows [m, m + R) x the 16 rows of one group, as two halves of 8 (rows 8h .. 8h + 7,
// bytes 32h .. 32h + 31 of each vector). vpmaddubsw's int16 pairs are summed over T::kSteps quads
// (quant_gemm's AVX2 tile's count, exact for the type's largest code), then widened by vpmaddwd.
template <class T, int R>
void tile(const Tile& t) {
  constexpr int kRuns = kQK / T::kRun;
  const Activations& a = *t.a;
  const int8_t* x = a.q + t.m * t.K;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < t.K / kQK; ++b) {
    const uint8_t* sb = t.w + b * T::kSuper;
    static_for<kRuns>([&](auto J) {
      constexpr int j = J;
      const int64_t g = b * kRuns + j;
      constexpr int kLines = (T::kSuper + 63) / 64;  // prefetched as the AVX-512 tile does
      if (t.m == 0)
        for (int i = j * kLines / kRuns; i < (j + 1) * kLines / kRuns; ++i)
          _mm_prefetch(reinterpret_cast<const char*>(sb + kAhead + 64 * i), _MM_HINT_T0);
      const int8_t* xg = x + g * T::kRun;
      __m128i sc, m;
      T::template affine<j>(sb, sc, m);
      for (int h = 0; h < 2; ++h) {
        __m256i sum[R];
        for (int r = 0; r < R; ++r)
          sum[r] = T::kShift != 0 ? _mm256_set1_epi32(-a.shifted[(t.m + r) * a.runs + g]) : _mm256_setzero_si256();
        __m256i pairs[R];
        static_for<T::kRun / 8>([&](auto P) {
          constexpr int p = P;
          if constexpr (2 * p % T::kSteps == 0)
            for (int r = 0; r < R; ++r) pairs[r] = _mm256_setzero_si256();
          __m256i u0, u1;
          T::template quads<V256, j, p>(sb, 32 * h, u0, u1);
          for (int r = 0; r < R; ++r) {
            pairs[r] = _mm256_add_epi16(pairs[r], _mm256_maddubs_epi16(u0, _mm256_set1_epi32(four_codes(xg + r * t.K + 8 * p))));
            pairs[r] = _mm256_add_epi16(pairs[r], _mm256_maddubs_epi16(u1, _mm256_set1_epi32(four_codes(xg + r * t.K + 8 * p + 4))));
          }
          if constexpr ((2 * p + 2) % T::kSteps == 0)
            for (int r = 0; r < R; ++r) sum[r] = _mm256_add_epi32(sum[r], _mm256_madd_epi16(pairs[r], ones));
        });
        const __m256 d = _mm256_cvtph_ps(load16(sb + 16 * h));
        const __m256 dl = _mm256_mul_ps(d, scale_f32<T::kSigned>(sc, h));
        for (int r = 0; r < R; ++r) {
          const __m256 dx = _mm256_set1_ps(a.dx[(t.m + r) * a.runs + g]);
          acc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[r]), _mm256_mul_ps(dl, dx), acc[r][h]);
        }
        if constexpr (T::kMin) {
          const __m256 ml = _mm256_mul_ps(_mm256_cvtph_ps(load16(sb + 32 + 16 * h)), scale_f32<false>(m, h));
          for (int r = 0; r < R; ++r)
            acc[r][h] = _mm256_fnmadd_ps(ml, _mm256_set1_ps(a.cx[(t.m + r) * a.runs + g]), acc[r][h]);
        }
      }
    });
  }
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(t.out + r * t.ld_out, acc[r][0]);
    _mm256_storeu_ps(t.out + r * t.ld_out + 8, acc[r][1]);
  }
}

// One group's codes as columns 16n .. 16n + 15 of quant_gemm's strip (quant_gemm.h), with its
// runs' dl and ml, a half of 8 rows at a time: unpacked once for a tile of many rows.
template <class T>
void unpack_to_strip(const uint8_t* group, int64_t K, int n, const QuantStrip& s) {
  constexpr int kRuns = kQK / T::kRun, kQuads = T::kRun / 4, kCols = kQuantStripCols;
  for (int64_t b = 0; b < K / kQK; ++b) {
    const uint8_t* sb = group + b * T::kSuper;
    static_for<kRuns>([&](auto J) {
      constexpr int j = J;
      const int64_t g = b * kRuns + j;
      __m128i sc, m;
      T::template affine<j>(sb, sc, m);
      for (int h = 0; h < 2; ++h) {
        static_for<T::kRun / 8>([&](auto P) {
          __m256i u0, u1;
          T::template quads<V256, j, P>(sb, 32 * h, u0, u1);
          _mm256_store_si256(reinterpret_cast<__m256i*>(s.codes + ((g * kQuads + 2 * P) * kCols + 16 * n + 8 * h) * 4), u0);
          _mm256_store_si256(reinterpret_cast<__m256i*>(s.codes + ((g * kQuads + 2 * P + 1) * kCols + 16 * n + 8 * h) * 4), u1);
        });
        const __m256 d = _mm256_cvtph_ps(load16(sb + 16 * h));
        _mm256_store_ps(s.scale + g * kCols + 16 * n + 8 * h, _mm256_mul_ps(d, scale_f32<T::kSigned>(sc, h)));
        if constexpr (T::kMin)
          _mm256_store_ps(s.minimum + g * kCols + 16 * n + 8 * h,
                          _mm256_mul_ps(_mm256_cvtph_ps(load16(sb + 32 + 16 * h)), scale_f32<false>(m, h)));
      }
    });
  }
}

// A tile of up to kDirectRows rows, unpacked in registers (see the note above tile_for): 2 rows
// of one group at a time.
constexpr int kDirectRows = 8;

template <class T>
void direct_rows(const Tile& t) { rows_in_pairs<tile<T, 2>, tile<T, 1>>(t); }

#endif

// note: a tile takes all of a call's rows (max_rows is unbounded) and two groups (max_groups).
// Up to kDirectRows rows it unpacks the codes in registers as it multiplies (decode, small
// batches); AVX-512 takes the two groups together up to 4 rows (one after the other from 5), so
// that each thread streams two groups at once and keeps more loads in flight (one group a tile streamed Q4_K and Q6_K from DRAM about 0.1x
// slower). From kDirectRows + 1 rows it unpacks its groups once into quant_gemm's strip and runs
// quant_gemm's register tiles over it (4 rows x 32 columns with AVX-512, 2 x 16 with AVX2):
// unpacked in registers, each code vector served a tile's few rows, and AVX-512 prefill ran at
// 0.7-0.9x quant_gemm's speed where its strip fits L1; from the strip, at 1.0-1.1x there and
// 1.2-1.35x where it does not, since the packed groups unpack from contiguous bytes (2-core Xeon,
// M = 256). Both give each element the same operations, so the threshold changes no bit.
constexpr int kMaxRows = 1 << 30, kMaxGroups = 2;

template <class T>
void tile_for(const Tile& t) {
  if (t.rows <= kDirectRows) return direct_rows<T>(t);
  strip_rows(t, T::kType, unpack_to_strip<T>);
}

template <class T>
constexpr TypeKernels kKernels{pack_group<T>, unpack_row<T>, tile_for<T>, kMaxRows, kMaxGroups};

}  // namespace

const TypeKernels* k_kernels(DType t) {
  switch (t) {
    case DType::q2_k: return &kKernels<Q2K>;
    case DType::q3_k: return &kKernels<Q3K>;
    case DType::q4_k: return &kKernels<Q4K>;
    case DType::q5_k: return &kKernels<Q5K>;
    case DType::q6_k: return &kKernels<Q6K>;
    default: return nullptr;
  }
}

#else

const TypeKernels* k_kernels(DType) { return nullptr; }

#endif

}  // namespace minfer::cpu::packed
