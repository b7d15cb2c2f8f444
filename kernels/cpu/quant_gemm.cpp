// Integer GEMM for prefill with quantized weights (kernels/cpu/quant_gemm.h).
//
// Every weight type is a run of codes with one affine map per run of G weights (G = 16 for the
// sub-blocks of Q2_K, Q3_K and Q6_K, 32 for the others): w = dl * q - ml. Shifted to unsigned
// bytes u = q + shift (shift 0 for the types whose codes are already 0 .. 31, 32 for the signed 3-
// to 6-bit ones, 128 for Q8_0), w = s * u + o with s = dl and o = -(shift * dl + ml). The
// activations of row i are int8 codes a with a scale dx per block of 32 or 256, as decode
// quantizes them, so one run of G weights of column n contributes
//   sum_k w[n][k] x[i][k] = dx[i][g] * (s[n][g] * sum_k u[n][k] a[i][k] + o[n][g] * sum_k a[i][k])
// where the first sum is integer: VNNI's vpdpbusd multiplies 64 unsigned bytes by 64 signed ones
// and adds each four into 16 int32 lanes, one instruction for what f32 needs four FMAs for.
//
// Layout (note): the weights are unpacked 32 columns at a time into a strip of bytes ordered
// [K / 4][32 columns][4], so that one 64-byte load holds 4 consecutive k of 16 columns, the order
// vpdpbusd wants, and the activations are broadcast 4 bytes (4 consecutive k of one row) at a
// time. A tile of 4 rows x 32 columns keeps 8 int32 sums for the current run and 8 f32 sums in
// registers; at the end of each run the int32 sums are converted and scaled into the f32 ones
// (4 instructions per 8 or 4 vpdpbusd). A strip is unpacked once and used by all M rows, so the
// unpacking costs 1/M of a weight's work per row.
#include "kernels/cpu/quant_gemm.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/quant_dot.h"
#include "kernels/cpu/quant_unpack.h"

namespace minfer::cpu {

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)

namespace {

constexpr int kStrip = 32;   // weight columns per strip: two vectors of 16 int32 lanes
constexpr int kTileRows = 4; // activation rows per register tile

// The shift that makes a type's codes unsigned bytes (see the top).
int code_shift(DType t) {
  switch (t) {
    case DType::q8_0: return 128;
    case DType::q4_1: case DType::q5_1: case DType::q2_k: case DType::q4_k: case DType::q5_k: return 0;
    default: return 32;
  }
}

// The activations of a call in the form the kernel reads: the codes of each row contiguous
// (M, K), and per run of G: dx and cx = dx * sum of the run's codes (M, K / G).
struct Activations {
  const int8_t* q;
  const float* dx;
  const float* cx;
  int64_t runs;  // K / G
};

template <class ActBlock>
void split_row(const ActBlock* blocks, int block, int G, int64_t K, int8_t* q, float* dx, float* cx) {
  for (int64_t k0 = 0; k0 < K; k0 += G) {
    const ActBlock& b = blocks[k0 / block];
    const int8_t* src = b.q + k0 % block;
    int sum = 0;
    for (int j = 0; j < G; ++j) sum += src[j];
    std::memcpy(q + k0, src, size_t(G));
    dx[k0 / G] = b.d;
    cx[k0 / G] = b.d * float(sum);
  }
}

Activations split_activations(ThreadPool& pool, DType w, const uint8_t* act, int64_t M, int64_t K, int G) {
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> scales;
  const int64_t runs = K / G;
  q.resize(size_t(M * K));
  scales.resize(size_t(2 * M * runs));
  int8_t* qp = q.data();
  float* dx = scales.data();
  float* cx = dx + M * runs;
  const size_t row_bytes = act_row_bytes(w, K);
  pool.parallel_for(M, 8, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const uint8_t* row = act + size_t(m) * row_bytes;
      int8_t* qm = qp + m * K;
      float *dm = dx + m * runs, *cm = cx + m * runs;
      if (is_k_quant(w))
        split_row(reinterpret_cast<const ActQ8_K*>(row), kQK, G, K, qm, dm, cm);
      else if (w == DType::q4_1 || w == DType::q5_1)
        split_row(reinterpret_cast<const ActQ8_1*>(row), 32, G, K, qm, dm, cm);
      else
        split_row(reinterpret_cast<const ActQ8_0*>(row), 32, G, K, qm, dm, cm);
    }
  });
  return {qp, dx, cx, runs};
}

// One strip: the codes of up to 32 weight columns as (K / 4, 32, 4) bytes, and each run's scale
// and offset as (K / G, 32) floats. Columns past n_cols are zero (they add nothing).
struct Strip {
  uint8_t* codes;
  float* scale;
  float* offset;
};

template <class Block>
void unpack_strip(const Strip& strip, const void* w, int64_t row_bytes, int64_t n_cols, int64_t K, int weights,
                  int G, int shift) {
  if (n_cols < kStrip) {
    std::memset(strip.codes, 0, size_t(K * kStrip));
    std::fill(strip.scale, strip.scale + K / G * kStrip, 0.0f);
    std::fill(strip.offset, strip.offset + K / G * kStrip, 0.0f);
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
        strip.offset[run * kStrip + c] = -(float(shift) * a.dl + a.ml);
      }
      k += 32;
    };
    for (int64_t b = 0; b < K / weights; ++b) unpack::codes(blocks[b], emit);
  }
}

// out rows [0, R) x the strip's columns (masked to the real ones): the register tile.
template <int R, int G>
void tile(const Strip& strip, const Activations& a, int64_t m, int64_t K, float* out, int64_t ld_out,
          __mmask16 mask0, __mmask16 mask1) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const int8_t* x = a.q + m * K;
  for (int64_t g = 0; g < a.runs; ++g) {
    __m512i sum[R][2];
    for (int r = 0; r < R; ++r) sum[r][0] = sum[r][1] = _mm512_setzero_si512();
    const uint8_t* codes = strip.codes + g * (G / 4) * (4 * kStrip);
    for (int k4 = 0; k4 < G / 4; ++k4) {
      const __m512i w0 = _mm512_loadu_si512(codes + k4 * 4 * kStrip);
      const __m512i w1 = _mm512_loadu_si512(codes + k4 * 4 * kStrip + 64);
      for (int r = 0; r < R; ++r) {
        int32_t four;
        std::memcpy(&four, x + r * K + g * G + 4 * k4, 4);
        const __m512i b = _mm512_set1_epi32(four);
        sum[r][0] = _mm512_dpbusd_epi32(sum[r][0], w0, b);
        sum[r][1] = _mm512_dpbusd_epi32(sum[r][1], w1, b);
      }
    }
    const __m512 s0 = _mm512_loadu_ps(strip.scale + g * kStrip), s1 = _mm512_loadu_ps(strip.scale + g * kStrip + 16);
    const __m512 o0 = _mm512_loadu_ps(strip.offset + g * kStrip), o1 = _mm512_loadu_ps(strip.offset + g * kStrip + 16);
    for (int r = 0; r < R; ++r) {
      const __m512 dx = _mm512_set1_ps(a.dx[(m + r) * a.runs + g]);
      const __m512 cx = _mm512_set1_ps(a.cx[(m + r) * a.runs + g]);
      acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[r][0]), _mm512_mul_ps(s0, dx), acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[r][1]), _mm512_mul_ps(s1, dx), acc[r][1]);
      acc[r][0] = _mm512_fmadd_ps(o0, cx, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(o1, cx, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(out + r * ld_out, mask0, acc[r][0]);
    _mm512_mask_storeu_ps(out + r * ld_out + 16, mask1, acc[r][1]);
  }
}

template <int G>
void strip_rows(const Strip& strip, const Activations& a, int64_t M, int64_t K, float* out, int64_t ld_out,
                int64_t n_cols) {
  const __mmask16 mask0 = n_cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n_cols) - 1);
  const __mmask16 mask1 = n_cols >= 32 ? __mmask16(0xFFFF) : n_cols <= 16 ? __mmask16(0) : __mmask16((1u << (n_cols - 16)) - 1);
  int64_t m = 0;
  for (; m + kTileRows <= M; m += kTileRows) tile<kTileRows, G>(strip, a, m, K, out + m * ld_out, ld_out, mask0, mask1);
  switch (M - m) {
    case 3: tile<3, G>(strip, a, m, K, out + m * ld_out, ld_out, mask0, mask1); break;
    case 2: tile<2, G>(strip, a, m, K, out + m * ld_out, ld_out, mask0, mask1); break;
    case 1: tile<1, G>(strip, a, m, K, out + m * ld_out, ld_out, mask0, mask1); break;
    default: break;
  }
}

}  // namespace

bool quant_gemm_supports(DType w) {
  return unpack::dispatch(w, [](const auto*, int) {});
}

void quant_gemm(ThreadPool& pool, float* out, int64_t ld_out, const uint8_t* act, const void* w, DType w_dtype,
                int64_t M, int64_t N, int64_t K) {
  MINFER_CHECK(quant_gemm_supports(w_dtype), "quant_gemm: no integer GEMM for ", dtype_name(w_dtype));
  const int G = unpack::affine_run(w_dtype);
  const Activations a = split_activations(pool, w_dtype, act, M, K, G);
  const int64_t row_bytes = K / dtype_block(w_dtype) * dtype_block_bytes(w_dtype);
  const int64_t strips = (N + kStrip - 1) / kStrip;
  const int shift = code_shift(w_dtype);
  pool.parallel_for(strips, 1, [&](int64_t s0, int64_t s1) {
    // Grows once, then reused.
    thread_local std::vector<uint8_t> codes;
    thread_local std::vector<float> affine;
    codes.resize(size_t(K * kStrip));
    affine.resize(size_t(2 * (K / G) * kStrip));
    const Strip strip{codes.data(), affine.data(), affine.data() + (K / G) * kStrip};
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t n0 = s * kStrip, n_cols = std::min<int64_t>(kStrip, N - n0);
      unpack::dispatch(w_dtype, [&](const auto* block, int weights) {
        using Block = std::remove_const_t<std::remove_pointer_t<decltype(block)>>;
        unpack_strip<Block>(strip, static_cast<const char*>(w) + n0 * row_bytes, row_bytes, n_cols, K, weights, G,
                            shift);
      });
      if (G == 16)
        strip_rows<16>(strip, a, M, K, out + n0, ld_out, n_cols);
      else
        strip_rows<32>(strip, a, M, K, out + n0, ld_out, n_cols);
    }
  });
}

#else

bool quant_gemm_supports(DType) { return false; }

void quant_gemm(ThreadPool&, float*, int64_t, const uint8_t*, const void*, DType w_dtype, int64_t, int64_t, int64_t) {
  MINFER_CHECK(false, "quant_gemm: this build has no AVX-512 VNNI (", dtype_name(w_dtype), ")");
}

#endif

}  // namespace minfer::cpu
