// Matrix products with Q8_0 weights: 34 bytes per 32 weights, so a decode step reads 3.76 times
// fewer bytes than with f32 weights, and decode, being memory-bound, can run that much faster if
// the arithmetic keeps up with the stream.
//
// Up to 32 activation rows (decode, batched decode): the activations are quantized once per call,
// per block of 32, exactly as the weights are (an f32 scale here), and each weight block meets each
// activation block in an int8 dot product: |w| * (x * sign(w)) in unsigned-by-signed byte
// multiplies (vpmaddubsw) summed to int32, converted once per block and scaled by both scales. 32
// weights cost about eight instructions, far below what the memory stream allows.
//
// note: widening the int8 weights to f32 in registers against f32 activations (exact, no second
// quantization) streams as fast at one row but falls behind from a few rows on, where its four f32
// FMAs per 8 weights per row bind (bench/results/NOTES.md has the measurements). The int8 path
// costs an NMSE of about 1.6e-5 per product (tests/test_backend_ops.cpp); llama.cpp makes the same
// choice.
//
// Above 32 rows (prefill), the activations are rounded the same way (quantized per block and back
// to f32, so that a token's logits do not depend on whether it was decoded or prefilled), and each
// thread dequantizes 64 weight rows at a time to f32 and hands them to Eigen's GEMM, where the
// dequantization is paid once for all M rows.
//
// note: rounding the activations is what llama.cpp's CPU backend does for every product with Q8_0
// weights, so `minfer perplexity` on Q8_0 agrees with llama-perplexity's, at the price of a larger
// KL divergence from f32 than the 8-bit weights alone cause (bench/results/NOTES.md).
#include "kernels/cpu/matmul_q8.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/simd.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace minfer::cpu {

namespace {

constexpr int64_t kSmallMaxRows = 32;  // as in matmul.cpp: decode of up to 32 sequences
constexpr int64_t kTileRows = 64;      // weight rows dequantized per step of the GEMM path

// An activation block: the same 32-element quantization as the weights, with an f32 scale.
struct ActBlock {
  float d;
  int8_t q[32];
};

void quantize_rows(ActBlock* dst, const float* x, int64_t ld_x, int64_t M, int64_t K) {
  const int64_t nb = K / 32;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < nb; ++b) {
      const float* v = x + m * ld_x + b * 32;
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
      const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
      ActBlock& a = dst[m * nb + b];
      a.d = d;
      for (int j = 0; j < 32; ++j) a.q[j] = static_cast<int8_t>(std::nearbyint(v[j] * id));
    }
}

inline float scale_of(const BlockQ8& b) {
#if defined(__F16C__)
  return _cvtsh_ss(b.d);
#else
  return f16_to_f32(b.d);
#endif
}

#if defined(__AVX2__)
// The 32 products of a weight block and an activation block, as 8 float partial sums.
inline __m256 block_dot(__m256i w_abs, __m256i w, __m256i x) {
  const __m256i pairs = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x, w));  // 16 x int16, no overflow: 2 * 127 * 127
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// out[m * ld_out] for MR activation rows against one weight row (nb blocks), int8 dot products.
template <int MR>
inline void row_int8(float* out, int64_t ld_out, const ActBlock* xq, int64_t nb, const BlockQ8* w) {
  __m256 acc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __builtin_prefetch(reinterpret_cast<const char*>(w + b) + 4096);  // 4 KiB ahead (bench/results/NOTES.md)
    const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].q));
    const __m256i wa = _mm256_sign_epi8(wq, wq);
    const float dw = scale_of(w[b]);
    for (int m = 0; m < MR; ++m) {
      const ActBlock& a = xq[m * nb + b];
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q));
      acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.d), block_dot(wa, wq, xv), acc[m]);
    }
  }
  for (int m = 0; m < MR; ++m) out[m * ld_out] = hsum(acc[m]);
}

#endif

#if !defined(__AVX2__)
// The same in plain C++ (builds without AVX2): integer dot products per block, then both scales.
void row_int8_scalar(float* out, int64_t ld_out, const ActBlock* xq, int64_t rows, int64_t nb, const BlockQ8* w) {
  for (int64_t m = 0; m < rows; ++m) {
    float s = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const ActBlock& a = xq[m * nb + b];
      int32_t dot = 0;
      for (int j = 0; j < 32; ++j) dot += int32_t(w[b].q[j]) * int32_t(a.q[j]);
      s += scale_of(w[b]) * a.d * float(dot);
    }
    out[m * ld_out] = s;
  }
}
#endif

void small_rows(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x, const BlockQ8* w,
                int64_t M, int64_t N, int64_t K) {
  const int64_t nb = K / 32;
  thread_local std::vector<ActBlock> quantized;  // grows once, then reused: no allocation per step
  quantized.resize(static_cast<size_t>(M * nb));
  quantize_rows(quantized.data(), x, ld_x, M, K);
  const ActBlock* xq = quantized.data();
  pool.parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const BlockQ8* row = w + n * nb;
#if defined(__AVX2__)
      for (int64_t m = 0; m < M; m += 4) {
        float* o = out + m * ld_out + n;
        const ActBlock* a = xq + m * nb;
        switch (std::min<int64_t>(4, M - m)) {
          case 4: row_int8<4>(o, ld_out, a, nb, row); break;
          case 3: row_int8<3>(o, ld_out, a, nb, row); break;
          case 2: row_int8<2>(o, ld_out, a, nb, row); break;
          default: row_int8<1>(o, ld_out, a, nb, row); break;
        }
      }
#else
      row_int8_scalar(out + n, ld_out, xq, M, nb, row);
#endif
    }
  });
}

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;

void gemm(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x, const BlockQ8* w, int64_t M,
          int64_t N, int64_t K) {
  const int64_t nb = K / 32;
  // The activations rounded as the small-row kernel rounds them: grows once, then reused.
  thread_local std::vector<ActBlock> quantized;
  thread_local std::vector<float, Eigen::aligned_allocator<float>> rounded;
  quantized.resize(static_cast<size_t>(M * nb));
  rounded.resize(static_cast<size_t>(M * K));
  quantize_rows(quantized.data(), x, ld_x, M, K);
  // note: the workers see their own thread_local vectors, so they get the caller's by pointer.
  const ActBlock* q = quantized.data();
  float* xr = rounded.data();
  pool.parallel_for(M, 8, [&](int64_t m0, int64_t m1) {
    for (int64_t i = m0 * nb; i < m1 * nb; ++i)
      for (int j = 0; j < 32; ++j) xr[i * 32 + j] = q[i].d * float(q[i].q[j]);
  });
  Eigen::Map<const RowMajor> X(xr, M, K);
  pool.parallel_for(N, kTileRows, [&](int64_t n0, int64_t n1) {
    // Grows once, then reused; aligned so that every thread computes with the same alignment.
    thread_local std::vector<float, Eigen::aligned_allocator<float>> tile;
    tile.resize(static_cast<size_t>(kTileRows * K));
    for (int64_t t0 = n0; t0 < n1; t0 += kTileRows) {
      const int64_t rows = std::min(kTileRows, n1 - t0);
      dequantize_q8_0(tile.data(), w + t0 * nb, static_cast<size_t>(rows * K));
      Eigen::Map<const RowMajor> Wt(tile.data(), rows, K);
      Eigen::Map<RowMajor, 0, Stride> O(out + t0, M, rows, Stride(ld_out));
      O.noalias() = X * Wt.transpose();
    }
  });
}

}  // namespace

void matmul_q8_0(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x, const BlockQ8* w,
                 int64_t M, int64_t N, int64_t K) {
  MINFER_CHECK(K % 32 == 0, "q8_0 matmul: K = ", K, " is not whole blocks of 32");
  if (M <= 0 || N <= 0) return;
  if (M <= kSmallMaxRows)
    small_rows(pool, out, ld_out, x, ld_x, w, M, N, K);
  else
    gemm(pool, out, ld_out, x, ld_x, w, M, N, K);
}

}  // namespace minfer::cpu
