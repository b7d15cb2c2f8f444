// Matrix products on the CPU: a streaming matrix-vector kernel for decode, Eigen GEMM for prefill.
//
// Decode multiplies one activation row (or a handful, one per sequence) by every weight matrix, so
// each weight is used once per row: 2 FLOPs per weight against 4 bytes read (f32). At that
// arithmetic intensity the CPU's memory bandwidth, not its FMA units, sets the speed, and the job
// is to stream the weights at full bandwidth: each thread reads a contiguous block of weight rows
// front to back (the hardware prefetcher's favourite pattern), keeps several independent
// accumulators so FMA latency never stalls the loads, and converts bf16/f16 weights to f32 in
// registers so only 2 bytes per weight cross the memory bus.
//
// Prefill multiplies hundreds of rows by the same weights: each weight is reused M times, the
// product becomes compute-bound, and a cache-blocked GEMM (Eigen's) is the right tool. f16/bf16
// weights are widened tile by tile into a per-thread buffer first; the conversion is paid once per
// tile and amortised over the M rows.
#include "kernels/cpu/matmul.h"

#include <Eigen/Core>
#include <algorithm>
#include <vector>

#include "kernels/cpu/simd.h"

namespace minfer::cpu {

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;

// out[m, n] for m < MR and n in [n0, n1): each weight row is loaded once and multiplied with all
// MR activation rows. U independent accumulators per row hide the FMA latency.
template <int MR, class W>
void gemv_rows(float* out, int64_t ld_out, const float* x, int64_t ld_x,
               const typename W::Stored* w, int64_t n0, int64_t n1, int64_t K) {
  constexpr int U = MR == 1 ? 4 : 2;
  constexpr int VW = simd::kWidth;
  for (int64_t n = n0; n < n1; ++n) {
    const typename W::Stored* row = w + n * K;
    simd::Vec acc[MR][U];
    for (int m = 0; m < MR; ++m)
      for (int u = 0; u < U; ++u) acc[m][u] = simd::zero();
    int64_t k = 0;
    for (; k + U * VW <= K; k += U * VW)
      for (int u = 0; u < U; ++u) {
        simd::Vec wv = W::load(row + k + u * VW);
        for (int m = 0; m < MR; ++m)
          acc[m][u] = simd::fma(wv, simd::load(x + m * ld_x + k + u * VW), acc[m][u]);
      }
    for (; k + VW <= K; k += VW) {
      simd::Vec wv = W::load(row + k);
      for (int m = 0; m < MR; ++m) acc[m][0] = simd::fma(wv, simd::load(x + m * ld_x + k), acc[m][0]);
    }
    for (int m = 0; m < MR; ++m) {
      simd::Vec total = acc[m][0];
      for (int u = 1; u < U; ++u) total = simd::add(total, acc[m][u]);
      float s = simd::sum(total);
      for (int64_t t = k; t < K; ++t) s += W::scalar(row + t) * x[m * ld_x + t];
      out[m * ld_out + n] = s;
    }
  }
}

template <class W>
void gemv(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x,
          const typename W::Stored* w, int64_t M, int64_t N, int64_t K) {
  // note: 16-row grains keep each thread's block of weights a contiguous stream.
  pool.parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
    switch (M) {
      case 1: gemv_rows<1, W>(out, ld_out, x, ld_x, w, n0, n1, K); break;
      case 2: gemv_rows<2, W>(out, ld_out, x, ld_x, w, n0, n1, K); break;
      case 3: gemv_rows<3, W>(out, ld_out, x, ld_x, w, n0, n1, K); break;
      default: gemv_rows<4, W>(out, ld_out, x, ld_x, w, n0, n1, K); break;
    }
  });
}

// Rows of weights widened per step on the GEMM path: 64 rows of K floats stay in L2.
constexpr int64_t kGemmTileRows = 64;

template <class W>
void gemm(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x,
          const typename W::Stored* w, int64_t M, int64_t N, int64_t K) {
  Eigen::Map<const RowMajor, 0, Stride> X(x, M, K, Stride(ld_x));
  pool.parallel_for(N, kGemmTileRows, [&](int64_t n0, int64_t n1) {
    if constexpr (std::is_same_v<W, simd::F32>) {
      Eigen::Map<const RowMajor> Wt(w + n0 * K, n1 - n0, K);
      Eigen::Map<RowMajor, 0, Stride> O(out + n0, M, n1 - n0, Stride(ld_out));
      O.noalias() = X * Wt.transpose();
    } else {
      // Grows once, then reused; aligned so that every thread computes with the same alignment.
      thread_local std::vector<float, Eigen::aligned_allocator<float>> tile;
      tile.resize(static_cast<size_t>(kGemmTileRows * K));
      for (int64_t t0 = n0; t0 < n1; t0 += kGemmTileRows) {
        int64_t rows = std::min(kGemmTileRows, n1 - t0);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t k = 0; k < K; ++k) tile[r * K + k] = W::scalar(w + (t0 + r) * K + k);
        Eigen::Map<const RowMajor> Wt(tile.data(), rows, K);
        Eigen::Map<RowMajor, 0, Stride> O(out + t0, M, rows, Stride(ld_out));
        O.noalias() = X * Wt.transpose();
      }
    }
  });
}

}  // namespace

void matmul(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x,
            const void* w, DType w_dtype, int64_t M, int64_t N, int64_t K) {
  if (M <= 0 || N <= 0) return;
  simd::dispatch_weight_type(w_dtype, [&](auto type) {
    using W = decltype(type);
    const auto* weights = static_cast<const typename W::Stored*>(w);
    if (M <= kGemvMaxRows)
      gemv<W>(pool, out, ld_out, x, ld_x, weights, M, N, K);
    else
      gemm<W>(pool, out, ld_out, x, ld_x, weights, M, N, K);
  });
}

}  // namespace minfer::cpu
