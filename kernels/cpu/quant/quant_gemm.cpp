// Integer GEMM for prefill and batched decode with quantized weights (kernels/cpu/quant/quant_gemm.h).
//
// Every weight type is a run of codes with one affine map per run of G weights (G = 16 for the
// sub-blocks of Q2_K, Q3_K and Q6_K, 32 for the others): w = dl * q - ml. The codes go to the
// multiplier as unsigned bytes u:
//   - the symmetric types (Q8_0, Q4_0, Q5_0, Q3_K, Q6_K: ml = 0, signed q) as u = q + shift, the
//     code as the file stores it (shift 8, 16, 4 and 32; 128 for Q8_0), so w = dl * (u - shift);
//   - the others (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K: unsigned q, a minimum) as u = q, w = dl * u - ml.
// The activations of row i are int8 codes a with a scale dx per block of 32 or 256, as decode
// quantizes them, so a run g of column n contributes
//   symmetric:  dx[i][g] * dl[n][g] * (sum_k u[n][k] a[i][k] - shift * sum_k a[i][k])
//   otherwise:  dx[i][g] * (dl[n][g] * sum_k u[n][k] a[i][k] - ml[n][g] * sum_k a[i][k])
// where the first sum is integer: VNNI's vpdpbusd multiplies 64 unsigned bytes by 64 signed ones
// and adds each four into 16 int32 lanes, one instruction for what f32 needs four FMAs for; AVX2's
// vpmaddubsw multiplies 32 and adds pairs into int16, summed over a few steps before one vpmaddwd
// widens them (the tile below says how few, per type). The
// symmetric types subtract shift * sum(a) in int32 too (the sum starts from it), so their only
// rounding is the conversion's and the scale's; the others add -ml * dx * sum(a) with one FMA.
//
// note: the weights are unpacked 32 columns at a time into a strip of bytes ordered
// [K / 4][32 columns][4], so that one 64-byte load holds 4 consecutive k of 16 columns, the order
// vpdpbusd wants, and the activations are broadcast 4 bytes (4 consecutive k of one row) at a
// time. A tile of 4 rows x 32 columns keeps 8 int32 sums for the current run and 8 f32 sums in
// registers; at the end of each run the int32 sums are converted and scaled into the f32 ones
// (3 or 4 instructions per 8 or 4 vpdpbusd). A strip is unpacked once and used by all M rows, so
// the unpacking costs 1/M of a weight's work per row. AVX2 reads the same strip as two halves of
// 16 columns, in tiles of 2 rows (16 registers).
// note: on AVX2 (AMD Zen 2, stories110M's shape, Q4_K_M, pp256, 3 interleaved rounds) this GEMM
// against the dequantized tiles and Eigen: 1.85x at 2 threads (about 1000 against 540 tokens/s),
// 1.64x at one (bench/results/NOTES.md).
#include "kernels/cpu/quant/quant_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/quants_blocks.h"
#include "kernels/cpu/quant/act_runs.h"
#include "kernels/cpu/quant/quant_unpack.h"

namespace minfer::cpu {

#if defined(MINFER_QUANT_GEMM_VNNI) || defined(MINFER_QUANT_GEMM_AVX2)

namespace {

constexpr int kStrip = kQuantStripCols;  // weight columns per strip: two vectors of 16 int32 lanes (four of 8 on AVX2)

// quant_gemm's own strips hold zeros past n_cols (unpack_strip): they add nothing.
using Strip = QuantStrip;

template <class Block>
void unpack_strip(const Strip& strip,
                  const void* w,  // (n_cols, K / weights) blocks, rows row_bytes apart
                  int64_t row_bytes, int64_t n_cols, int64_t K, int G, int shift) {
  constexpr int kWeights = blocks::Traits<Block>::kWeights;
  if (n_cols < kStrip) {
    std::memset(strip.codes, 0, size_t(K * kStrip));
    std::fill(strip.scale, strip.scale + K / G * kStrip, 0.0f);
    std::fill(strip.minimum, strip.minimum + K / G * kStrip, 0.0f);
  }
  const __m256i add = _mm256_set1_epi8(static_cast<char>(shift));
  for (int64_t c = 0; c < n_cols; ++c) {
    const auto* blocks = reinterpret_cast<const Block*>(static_cast<const char*>(w) + c * row_bytes);
    int64_t k = 0;
    alignas(32) uint8_t u[32];
    auto emit = [&](__m256i q, unpack::Affine a0, unpack::Affine a1) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(u), _mm256_add_epi8(q, add));
      for (int j = 0; j < 8; ++j) std::memcpy(strip.codes + ((k / 4 + j) * kStrip + c) * 4, u + 4 * j, 4);
      for (int h = 0; h < 32 / G; ++h) {
        const unpack::Affine& a = h == 0 ? a0 : a1;
        const int64_t run = (k + h * G) / G;
        strip.scale[run * kStrip + c] = a.dl;
        strip.minimum[run * kStrip + c] = a.ml;
      }
      k += 32;
    };
    for (int64_t b = 0; b < K / kWeights; ++b) unpack::codes(blocks[b], emit);
  }
}

#if defined(MINFER_QUANT_GEMM_VNNI)
constexpr int kTileRows = 4;  // activation rows per register tile

// Rows [m, m + R) of out x the strip's 32 columns (masked to the real ones): the register tile.
template <int R, int G, bool kSymmetric>
void tile(const Strip& strip, const Activations& a, int64_t m, int64_t K,
          float* out,  // (R, 32) of the output, rows ld_out apart
          int64_t ld_out, __mmask16 mask0, __mmask16 mask1) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const int8_t* x = a.q + m * K;
  for (int64_t g = 0; g < a.runs; ++g) {
    __m512i sum[R][2];
    for (int r = 0; r < R; ++r)
      sum[r][0] = sum[r][1] = kSymmetric ? _mm512_set1_epi32(-a.shifted[(m + r) * a.runs + g]) : _mm512_setzero_si512();
    const uint8_t* codes = strip.codes + g * (G / 4) * (4 * kStrip);
    for (int k4 = 0; k4 < G / 4; ++k4) {
      const __m512i w0 = _mm512_load_si512(codes + k4 * 4 * kStrip);
      const __m512i w1 = _mm512_load_si512(codes + k4 * 4 * kStrip + 64);
      for (int r = 0; r < R; ++r) {
        int32_t four;
        std::memcpy(&four, x + r * K + g * G + 4 * k4, 4);
        const __m512i b = _mm512_set1_epi32(four);
        sum[r][0] = _mm512_dpbusd_epi32(sum[r][0], w0, b);
        sum[r][1] = _mm512_dpbusd_epi32(sum[r][1], w1, b);
      }
    }
    const __m512 s0 = _mm512_load_ps(strip.scale + g * kStrip), s1 = _mm512_load_ps(strip.scale + g * kStrip + 16);
    for (int r = 0; r < R; ++r) {
      const __m512 dx = _mm512_set1_ps(a.dx[(m + r) * a.runs + g]);
      acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[r][0]), _mm512_mul_ps(s0, dx), acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[r][1]), _mm512_mul_ps(s1, dx), acc[r][1]);
    }
    if constexpr (!kSymmetric) {
      const __m512 m0 = _mm512_load_ps(strip.minimum + g * kStrip), m1 = _mm512_load_ps(strip.minimum + g * kStrip + 16);
      for (int r = 0; r < R; ++r) {
        const __m512 cx = _mm512_set1_ps(a.cx[(m + r) * a.runs + g]);
        acc[r][0] = _mm512_fnmadd_ps(m0, cx, acc[r][0]);
        acc[r][1] = _mm512_fnmadd_ps(m1, cx, acc[r][1]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(out + r * ld_out, mask0, acc[r][0]);
    if (mask1 != 0) _mm512_mask_storeu_ps(out + r * ld_out + 16, mask1, acc[r][1]);
  }
}

template <int G, bool kSymmetric>
void strip_rows(const Strip& strip, const Activations& a, int64_t M, int64_t K,
                float* out,  // (M, n_cols) of the output, rows ld_out apart
                int64_t ld_out, int64_t n_cols) {
  const __mmask16 mask0 = n_cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n_cols) - 1);
  const __mmask16 mask1 = n_cols >= 32 ? __mmask16(0xFFFF) : n_cols <= 16 ? __mmask16(0) : __mmask16((1u << (n_cols - 16)) - 1);
  int64_t m = 0;
  for (; m + kTileRows <= M; m += kTileRows)
    tile<kTileRows, G, kSymmetric>(strip, a, m, K, out + m * ld_out, ld_out, mask0, mask1);
  switch (M - m) {
    case 3: tile<3, G, kSymmetric>(strip, a, m, K, out + m * ld_out, ld_out, mask0, mask1); break;
    case 2: tile<2, G, kSymmetric>(strip, a, m, K, out + m * ld_out, ld_out, mask0, mask1); break;
    case 1: tile<1, G, kSymmetric>(strip, a, m, K, out + m * ld_out, ld_out, mask0, mask1); break;
    default: break;
  }
}

void strip_rows_for(DType, int G, bool symmetric, const Strip& strip, const Activations& a, int64_t M, int64_t K,
                    float* out, int64_t ld_out, int64_t n_cols) {
  if (G == 16 && symmetric) return strip_rows<16, true>(strip, a, M, K, out, ld_out, n_cols);
  if (G == 16) return strip_rows<16, false>(strip, a, M, K, out, ld_out, n_cols);
  if (symmetric) return strip_rows<32, true>(strip, a, M, K, out, ld_out, n_cols);
  strip_rows<32, false>(strip, a, M, K, out, ld_out, n_cols);
}
#else  // AVX2
// The AVX2 register tile. vpmaddubsw multiplies 32 unsigned codes by 32 signed activation bytes
// and adds each pair into int16; S steps of 4 k are summed in int16 (exact while every lane's
// 2 * S products stay within int16: 2 * S * umax * 128 <= 32767), then vpmaddwd by ones widens the
// sums to int32, 8 columns a vector, into the run's sum, converted and scaled as above. A tile is
// R <= 2 rows x 16 columns (half a strip): its int16, int32 and f32 sums, two weight vectors, a
// broadcast and the vector of ones fill the 16 registers.
// note: Q8_0 stays on the dequantized tiles: its codes reach 255 as unsigned bytes, and a pair of
// products 2 * 255 * 127 saturates vpmaddubsw's int16.
constexpr int kTileRows = 2;
constexpr int kHalf = 16;  // columns per tile

// The largest unsigned code of a type as the strip holds it (u = q + code_shift, or q).
int code_max(DType t) {
  switch (t) {
    case DType::q2_k: return 3;
    case DType::q3_k: return 7;
    case DType::q4_0: case DType::q4_1: case DType::q4_k: return 15;
    case DType::q5_0: case DType::q5_1: case DType::q5_k: return 31;
    case DType::q6_k: return 63;
    default: return 255;
  }
}

// Rows [m, m + R) of out x columns [16 h, 16 h + cols) of the strip.
template <int R, int G, int S, bool kSymmetric>
void tile(const Strip& strip, const Activations& a, int64_t m, int64_t K, int h,
          float* out,  // (R, cols) of the output, rows ld_out apart
          int64_t ld_out, int cols) {
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const int8_t* x = a.q + m * K;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t g = 0; g < a.runs; ++g) {
    __m256i sum[R][2];
    for (int r = 0; r < R; ++r)
      sum[r][0] = sum[r][1] = kSymmetric ? _mm256_set1_epi32(-a.shifted[(m + r) * a.runs + g]) : _mm256_setzero_si256();
    const uint8_t* codes = strip.codes + g * (G / 4) * (4 * kStrip) + h * kHalf * 4;
    for (int k0 = 0; k0 < G / 4; k0 += S) {
      __m256i pairs[R][2];
      for (int r = 0; r < R; ++r) pairs[r][0] = pairs[r][1] = _mm256_setzero_si256();
      for (int k4 = k0; k4 < k0 + S; ++k4) {
        const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes + k4 * 4 * kStrip));
        const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes + k4 * 4 * kStrip + 32));
        for (int r = 0; r < R; ++r) {
          int32_t four;
          std::memcpy(&four, x + r * K + g * G + 4 * k4, 4);
          const __m256i b = _mm256_set1_epi32(four);
          pairs[r][0] = _mm256_add_epi16(pairs[r][0], _mm256_maddubs_epi16(w0, b));
          pairs[r][1] = _mm256_add_epi16(pairs[r][1], _mm256_maddubs_epi16(w1, b));
        }
      }
      for (int r = 0; r < R; ++r)
        for (int v = 0; v < 2; ++v) sum[r][v] = _mm256_add_epi32(sum[r][v], _mm256_madd_epi16(pairs[r][v], ones));
    }
    const float* scale = strip.scale + g * kStrip + h * kHalf;
    const __m256 s0 = _mm256_load_ps(scale), s1 = _mm256_load_ps(scale + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 dx = _mm256_set1_ps(a.dx[(m + r) * a.runs + g]);
      acc[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[r][0]), _mm256_mul_ps(s0, dx), acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[r][1]), _mm256_mul_ps(s1, dx), acc[r][1]);
    }
    if constexpr (!kSymmetric) {
      const float* minimum = strip.minimum + g * kStrip + h * kHalf;
      const __m256 m0 = _mm256_load_ps(minimum), m1 = _mm256_load_ps(minimum + 8);
      for (int r = 0; r < R; ++r) {
        const __m256 cx = _mm256_set1_ps(a.cx[(m + r) * a.runs + g]);
        acc[r][0] = _mm256_fnmadd_ps(m0, cx, acc[r][0]);
        acc[r][1] = _mm256_fnmadd_ps(m1, cx, acc[r][1]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    if (cols == kHalf) {
      _mm256_storeu_ps(out + r * ld_out, acc[r][0]);
      _mm256_storeu_ps(out + r * ld_out + 8, acc[r][1]);
    } else {
      alignas(32) float row[kHalf];
      _mm256_store_ps(row, acc[r][0]);
      _mm256_store_ps(row + 8, acc[r][1]);
      std::memcpy(out + r * ld_out, row, sizeof(float) * size_t(cols));
    }
  }
}

template <int G, int S, bool kSymmetric>
void strip_rows(const Strip& strip, const Activations& a, int64_t M, int64_t K,
                float* out,  // (M, n_cols) of the output, rows ld_out apart
                int64_t ld_out, int64_t n_cols) {
  for (int64_t m = 0; m < M; m += kTileRows)
    for (int h = 0; h * kHalf < n_cols; ++h) {
      const int cols = int(std::min<int64_t>(kHalf, n_cols - h * kHalf));
      float* o = out + m * ld_out + h * kHalf;
      if (m + kTileRows <= M)
        tile<kTileRows, G, S, kSymmetric>(strip, a, m, K, h, o, ld_out, cols);
      else
        tile<1, G, S, kSymmetric>(strip, a, m, K, h, o, ld_out, cols);
    }
}

void strip_rows_for(DType w, int G, bool symmetric, const Strip& strip, const Activations& a, int64_t M, int64_t K,
                    float* out, int64_t ld_out, int64_t n_cols) {
  const int steps = std::min(G / 4, 32767 / (256 * code_max(w)));  // S of the tile
  if (G == 32 && steps == 8) {
    if (symmetric) return strip_rows<32, 8, true>(strip, a, M, K, out, ld_out, n_cols);
    return strip_rows<32, 8, false>(strip, a, M, K, out, ld_out, n_cols);
  }
  if (G == 32 && steps == 4) {
    if (symmetric) return strip_rows<32, 4, true>(strip, a, M, K, out, ld_out, n_cols);
    return strip_rows<32, 4, false>(strip, a, M, K, out, ld_out, n_cols);
  }
  if (G == 16 && steps == 4) {
    if (symmetric) return strip_rows<16, 4, true>(strip, a, M, K, out, ld_out, n_cols);
    return strip_rows<16, 4, false>(strip, a, M, K, out, ld_out, n_cols);
  }
  MINFER_CHECK(G == 16 && steps == 2 && symmetric, "quant_gemm: no AVX2 tile for ", dtype_name(w));
  strip_rows<16, 2, true>(strip, a, M, K, out, ld_out, n_cols);
}
#endif

}  // namespace

void quant_strip_rows(DType w, const QuantStrip& strip, const Activations& a, int64_t M, int64_t K, float* out,
                      int64_t ld_out, int64_t n_cols) {
  strip_rows_for(w, unpack::affine_run(w), code_shift(w) != 0, strip, a, M, K, out, ld_out, n_cols);
}

// note: the rows from which the GEMM beats the dot products (quant_gemm_min_rows) were measured on a
// Zen 4, 2 threads, 3072 x 768 weights, medians of 3 rounds, the AVX2 build run on the same CPU
// (bench/results/NOTES.md, "Batched decode with quantized weights"). The GEMM pays a fixed cost per
// call, the strips unpacked, which the dot products do not; the dot products reload each weight row
// once per 4 activation rows. Q4_1 and Q5_1, whose dot products cost the most, cross first; Q2_K,
// Q3_K and Q6_K, whose dot products cost the least, last.
#if defined(MINFER_QUANT_GEMM_VNNI)
bool quant_gemm_supports(DType w) { return is_quantized(w); }

int64_t quant_gemm_min_rows(DType w) {
  switch (w) {
    case DType::q4_1: case DType::q5_1: return 5;
    case DType::q5_0: return 6;
    case DType::q8_0: case DType::q4_0: case DType::q5_k: return 10;
    case DType::q4_k: return 16;
    case DType::q6_k: return 20;
    default: return 24;  // q2_k, q3_k
  }
}
#else
bool quant_gemm_supports(DType w) { return is_quantized(w) && w != DType::q8_0; }

int64_t quant_gemm_min_rows(DType w) {
  switch (w) {
    case DType::q4_1: case DType::q5_1: return 5;
    case DType::q5_0: return 6;
    case DType::q5_k: return 16;
    case DType::q4_0: case DType::q4_k: case DType::q6_k: return 24;
    default: return 33;  // q2_k, q3_k (and q8_0, which takes no integer GEMM here)
  }
}
#endif

void quant_gemm(ThreadPool& pool, float* out, int64_t ld_out, const uint8_t* act, const void* w, DType w_dtype,
                int64_t M, int64_t N, int64_t K) {
  MINFER_CHECK(quant_gemm_supports(w_dtype), "quant_gemm: no integer GEMM for ", dtype_name(w_dtype));
  MINFER_CHECK(K % dtype_block(w_dtype) == 0, dtype_name(w_dtype), " quant_gemm: K = ", K,
               " is not whole blocks of ", dtype_block(w_dtype));
  if (M <= 0 || N <= 0) return;
  const int G = unpack::affine_run(w_dtype), shift = code_shift(w_dtype);
  const bool symmetric = shift != 0;
  const Activations a = split_activations(pool, w_dtype, act, M, K, G, shift);
  const int64_t row_bytes = K / dtype_block(w_dtype) * dtype_block_bytes(w_dtype);
  const int64_t strips = (N + kStrip - 1) / kStrip;
  pool.parallel_for(strips, 1, [&](int64_t s0, int64_t s1) {
    // Grows once, then reused.
    thread_local std::vector<uint8_t> codes;
    thread_local std::vector<float> affine;
    float* scale = aligned_64(affine, size_t(2 * (K / G) * kStrip));
    const Strip strip{aligned_64(codes, size_t(K * kStrip)), scale, scale + (K / G) * kStrip};
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t n0 = s * kStrip, n_cols = std::min<int64_t>(kStrip, N - n0);
      blocks::dispatch_block(w_dtype, [&](auto tag) {
        using Block = typename decltype(tag)::type;
        unpack_strip<Block>(strip, static_cast<const char*>(w) + n0 * row_bytes, row_bytes, n_cols, K, G, shift);
      });
      strip_rows_for(w_dtype, G, symmetric, strip, a, M, K, out + n0, ld_out, n_cols);
    }
  });
}

#else

bool quant_gemm_supports(DType) { return false; }
int64_t quant_gemm_min_rows(DType) { return 33; }

void quant_strip_rows(DType w, const QuantStrip&, const Activations&, int64_t, int64_t, float*, int64_t, int64_t) {
  MINFER_CHECK(false, "quant_strip_rows: this build has neither AVX-512 VNNI nor AVX2 with FMA (", dtype_name(w), ")");
}

void quant_gemm(ThreadPool&, float*, int64_t, const uint8_t*, const void*, DType w_dtype, int64_t, int64_t, int64_t) {
  MINFER_CHECK(false, "quant_gemm: this build has neither AVX-512 VNNI nor AVX2 with FMA (", dtype_name(w_dtype), ")");
}

#endif

}  // namespace minfer::cpu
