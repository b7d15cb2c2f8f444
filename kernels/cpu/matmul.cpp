// Matrix products on the CPU: out (M, N) = x (M, K) times w (N, K) transposed.
//
// Which kernel runs depends on how often each weight is reused, which is M, the number of
// activation rows. Decode multiplies one row per sequence: 2 FLOPs per weight against 4 bytes
// read (f32), so memory bandwidth sets the speed and the job is to stream every weight once at
// full bandwidth. A batch of 8 to 32 sequences reuses each weight that many times and the FMA
// units become the limit. Prefill reuses each weight hundreds of times, and cache blocking decides.
//
//   rows M    weights    kernel        why
//   1         any        one_row       one sequential stream over the weight rows, the pattern the
//                                      hardware prefetcher follows best; f16/bf16 widened in
//                                      registers, so only 2 bytes per weight cross the bus (bf16
//                                      as even and odd halves: one_row_bf16); with batch_invariant
//                                      (matmul.h) every M, a row at a time
//   2-7       any        small_m       4 weight rows x up to 4 activation rows per tile: each weight
//                                      vector loaded feeds up to 4 FMAs (the rows past 4 load it
//                                      again, from L1), and is read from memory exactly once
//   8-32      f32        outer         (AVX2, AVX-512) outer products: weights broadcast into FMAs with
//                                      one vector of rows at once (16 with AVX-512, 8 with AVX2),
//                                      no horizontal sums (compute-bound); rows left over after a
//                                      whole vector, up to 3/4 of one, take the small_m tile
//   8-32      f16/bf16   small_m       broadcasting a 16-bit weight would cost a conversion per FMA
//                                      (and f32 too in a build without AVX2)
//   > 32      any        panels        AVX2 or AVX-512: panels of 2 vectors of weight rows packed
//                                      transposed (f16/bf16 widened) 256 values of k at a time,
//                                      register tiles of 6 (AVX2) or 8 (AVX-512) rows x the
//                                      panel's columns
//   > 32      any        gemm          without AVX2: Eigen's cache-blocked GEMM on each thread's
//                                      slice of the weights; f16/bf16 widened 64 rows at a time
//   any       quantized  matmul_quant.cpp: integer dot products below the rows from which the
//                                      integer GEMM wins (5 to 24 by type with AVX-512 VNNI, 5 to 33
//                                      with AVX2: quant_gemm_min_rows; every M with batch_invariant),
//                                      the integer GEMM from there; Q8_0 on AVX2: dot products up
//                                      to 32 rows and dequantized tiles into the panels above;
//                                      without AVX2: dot products for every M (invariant). The
//                                      backend's packed weights take matmul_packed (quant/packed.h)
//
// choose_kernel() below is this table, and this file holds it, the dispatch and one_row, the plain
// SIMD dot product decode runs; the other f32/f16/bf16 kernels of the table, tuned for their
// shapes, are in kernels/cpu/tuned/matmul_tuned.cpp, the quantized ones in kernels/cpu/quant/. The
// measurements behind the table's boundaries are in bench/results/NOTES.md.
#include "kernels/cpu/matmul.h"

#include <type_traits>

#include "kernels/cpu/quant/matmul_quant.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/tuned/matmul_tuned.h"

namespace minfer::cpu {

namespace {

enum class Kernel { one_row, small_m, outer, gemm, panels };

constexpr int64_t kOuterMinRows = 8;  // the fewest rows outer takes: one vector of 8 lanes (simd::kWidth)

Kernel choose_kernel(int64_t M, DType w_dtype, bool batch_invariant) {
  if (batch_invariant) return Kernel::one_row;  // every row as a lone one (matmul.h)
#if defined(MINFER_PANELS)
  if (M > kSmallMaxRows) return Kernel::panels;
#endif
  if (simd::kWidth >= 8 && w_dtype == DType::f32 && M >= kOuterMinRows && M <= kSmallMaxRows) return Kernel::outer;
  if (M == 1) return Kernel::one_row;
  return M <= kSmallMaxRows ? Kernel::small_m : Kernel::gemm;
}

// One activation row against weight rows [n0, n1), the rows read one after another: a single
// sequential stream (prefetched simd::kStreamAhead ahead).
// note: at one row this beats small_m's 4-row tile (tuned/matmul_tuned.cpp), whose four rows are
// four interleaved streams, once each step reads 256 bytes (bench/results/NOTES.md, "One-sequence
// decode reads weight rows one after another").
template <class W>
void one_row(float* out, const float* x, const typename W::Stored* w, int64_t n0, int64_t n1, int64_t K) {
  // U vectors a step: 256 bytes of weights with AVX-512, 128 with AVX2
  constexpr int VW = simd::kWidth, U = 16 / sizeof(typename W::Stored);
  for (int64_t n = n0; n < n1; ++n) {
    const typename W::Stored* row = w + n * K;
    simd::Vec acc[U];
    for (auto& a : acc) a = simd::zero();
    int64_t k = 0;
    for (; k + U * VW <= K; k += U * VW) {
      simd::prefetch_stream(row + k, U * VW * int64_t(sizeof(typename W::Stored)));
      for (int u = 0; u < U; ++u) acc[u] = simd::fma(W::load(row + k + u * VW), simd::load(x + k + u * VW), acc[u]);
    }
    for (; k + VW <= K; k += VW) acc[0] = simd::fma(W::load(row + k), simd::load(x + k), acc[0]);
    for (int u = 1; u < U; ++u) acc[0] = simd::add(acc[0], acc[u]);
    float s = simd::sum(acc[0]);
    for (; k < K; ++k) s += W::scalar(row + k) * x[k];
    out[n] = s;
  }
}

// Each of the M activation rows as one_row computes a lone row, as one_row_bf16_blocks does.
template <class W>
void one_row_blocks(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x,
                    const typename W::Stored* w, int64_t M, int64_t N, int64_t K) {
  pool.parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t m = 0; m < M; ++m) one_row<W>(out + m * ld_out, x + m * ld_x, w, n0, n1, K);
  });
}

}  // namespace

void matmul(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x,
            const void* w, DType w_dtype, int64_t M, int64_t N, int64_t K, bool batch_invariant) {
  if (M <= 0 || N <= 0) return;
  if (is_quantized(w_dtype)) {
    matmul_quant(pool, out, ld_out, x, ld_x, w, w_dtype, M, N, K, batch_invariant);
    return;
  }
  switch (choose_kernel(M, w_dtype, batch_invariant)) {
    case Kernel::one_row:
      if (w_dtype == DType::bf16)
        return one_row_bf16_blocks(pool, out, ld_out, x, ld_x, static_cast<const uint16_t*>(w), M, N, K);
      return simd::dispatch_weight_type(w_dtype, [&](auto type) {
        using W = decltype(type);
        one_row_blocks<W>(pool, out, ld_out, x, ld_x, static_cast<const typename W::Stored*>(w), M, N, K);
      });
    case Kernel::small_m: return small_m(pool, out, ld_out, x, ld_x, w, w_dtype, M, N, K);
    case Kernel::outer: return outer(pool, out, ld_out, x, ld_x, static_cast<const float*>(w), M, N, K);
    case Kernel::gemm: return gemm(pool, out, ld_out, x, ld_x, w, w_dtype, M, N, K);
    case Kernel::panels:
#if defined(MINFER_PANELS)
      return panels(pool, out, ld_out, x, ld_x, w, w_dtype, M, N, K);
#else
      fail("matmul: the panels are not built without AVX2");
#endif
  }
}

}  // namespace minfer::cpu
