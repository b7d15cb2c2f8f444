// The products of kernels/cpu/matmul.cpp's table other than one_row, each tuned for the shape it
// takes (kernels/cpu/tuned/matmul_tuned.h): small_m's register tiles for 2-32 rows, outer products
// for f32 batches of 8-32 rows, prefill's panels (AVX2, AVX-512), Eigen's GEMM, and bf16 decode's even/odd loads.
// Each is held to the plain loops of kernels/ref/matmul.cpp by the op harness.
#include "kernels/cpu/tuned/matmul_tuned.h"

#include <Eigen/Core>
#include <algorithm>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/simd.h"

namespace minfer::cpu {

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;

// note: the small-M kernel works on the weights in their stored layout ([N, K], one output
// feature per row), as dot products along K. A tile is 4 weight rows x MR activation rows: each
// weight vector loaded from memory feeds MR FMAs, each activation vector (from L1) feeds 4, and
// the 4 x MR accumulators are independent FMA chains. The horizontal sums at the end of a tile
// (simd::sum4) are paid once per 16 outputs. No packing: every weight is read exactly once per
// call, which is what decode needs.

// out[m, n0 .. n0+3] for m < MR, from weight rows w[0 .. 3] (row stride K). With `next` set,
// the next tile's rows are prefetched on the way: four rows of a few hundred bytes each are too
// short a stream for the hardware prefetcher to ramp up on.
template <int MR, class W>
inline void tile4(float* out, int64_t ld_out, const float* x, int64_t ld_x,
                  const typename W::Stored* w, int64_t K, const typename W::Stored* next) {
  constexpr int VW = simd::kWidth;
  simd::Vec acc[MR][4];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < 4; ++r) acc[m][r] = simd::zero();
  int64_t k = 0;
  for (; k + VW <= K; k += VW) {
    if (next != nullptr)
      for (int r = 0; r < 4; ++r) __builtin_prefetch(next + r * K + k);
    simd::Vec wv[4];
    for (int r = 0; r < 4; ++r) {
      wv[r] = W::load(w + r * K + k);
      simd::keep_in_register(wv[r]);
    }
    for (int m = 0; m < MR; ++m) {
      simd::Vec xv = simd::load(x + m * ld_x + k);
      simd::keep_in_register(xv);
      for (int r = 0; r < 4; ++r) acc[m][r] = simd::fma(wv[r], xv, acc[m][r]);
    }
  }
  float sums[MR][4];
#if defined(__AVX512F__)
  if constexpr (MR == 4) {
    // All 16 sums of the tile in one shared reduction tree; sums[m][r] = acc[m][r] in order.
    simd::store(&sums[0][0], simd::sum16(&acc[0][0]));
  } else
#endif
  {
    for (int m = 0; m < MR; ++m) simd::sum4(acc[m][0], acc[m][1], acc[m][2], acc[m][3], sums[m]);
  }
  for (int m = 0; m < MR; ++m) {
    for (int64_t t = k; t < K; ++t)
      for (int r = 0; r < 4; ++r) sums[m][r] += W::scalar(w + r * K + t) * x[m * ld_x + t];
    for (int r = 0; r < 4; ++r) out[m * ld_out + r] = sums[m][r];
  }
}

// out[m, n0] for m < MR, from one weight row (the last N % 4 rows).
template <int MR, class W>
inline void tile1(float* out, int64_t ld_out, const float* x, int64_t ld_x,
                  const typename W::Stored* w, int64_t K) {
  constexpr int VW = simd::kWidth;
  simd::Vec acc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = simd::zero();
  int64_t k = 0;
  for (; k + VW <= K; k += VW) {
    simd::Vec wv = W::load(w + k);
    for (int m = 0; m < MR; ++m) acc[m] = simd::fma(wv, simd::load(x + m * ld_x + k), acc[m]);
  }
  for (int m = 0; m < MR; ++m) {
    float s = simd::sum(acc[m]);
    for (int64_t t = k; t < K; ++t) s += W::scalar(w + t) * x[m * ld_x + t];
    out[m * ld_out] = s;
  }
}


// Every activation row against weight rows [n0, n1): the weight tile stays in L1 while all M
// rows pass over it.
template <class W>
void small_m_rows(float* out, int64_t ld_out, const float* x, int64_t ld_x,
                  const typename W::Stored* w, int64_t M, int64_t n0, int64_t n1, int64_t K) {
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    const typename W::Stored* rows = w + n * K;
    // The first pass over this tile (rows 0..3 of x) prefetches the next tile.
    const typename W::Stored* next = n + 8 <= n1 ? rows + 4 * K : nullptr;
    int64_t m = 0;
    for (; m + 4 <= M; m += 4, next = nullptr)
      tile4<4, W>(out + m * ld_out + n, ld_out, x + m * ld_x, ld_x, rows, K, next);
    switch (M - m) {
      case 3: tile4<3, W>(out + m * ld_out + n, ld_out, x + m * ld_x, ld_x, rows, K, next); break;
      case 2: tile4<2, W>(out + m * ld_out + n, ld_out, x + m * ld_x, ld_x, rows, K, next); break;
      case 1: tile4<1, W>(out + m * ld_out + n, ld_out, x + m * ld_x, ld_x, rows, K, next); break;
      default: break;
    }
  }
  for (; n < n1; ++n) {
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) tile1<4, W>(out + m * ld_out + n, ld_out, x + m * ld_x, ld_x, w + n * K, K);
    for (; m < M; ++m) tile1<1, W>(out + m * ld_out + n, ld_out, x + m * ld_x, ld_x, w + n * K, K);
  }
}

// bf16 weights, one activation row, as one_row but 2 * VW weights a load, split into their even-
// and odd-indexed halves by load_bf16_pairs and met by the activations split the same way once
// per call; the rest of a row (under one step) as one_row does it.
// note: load_bf16 widens 16 weights with a shuffle across the register's lanes (vpmovzxwd), and
// that shuffle, not the memory, can bound bf16 decode: it did on a Zen 4 (bench/results/NOTES.md,
// "bf16 decode on AMD Zen 4: the widening shuffle bound it"). The pairs need no shuffle.
void one_row_bf16(float* out,            // (N) of which [n0, n1)
                  const float* x,        // (K)
                  const float* x_even,   // (K / 2): x[2i]
                  const float* x_odd,    // (K / 2): x[2i + 1]
                  const uint16_t* w,     // (N, K)
                  int64_t n0, int64_t n1, int64_t K) {
  constexpr int VW = simd::kWidth, U = 4;  // 4 loads of 2 * VW weights: 256 bytes with AVX-512
  constexpr int64_t kStep = 2 * VW * U;
  for (int64_t n = n0; n < n1; ++n) {
    const uint16_t* row = w + n * K;
    simd::Vec acc[2 * U];
    for (auto& a : acc) a = simd::zero();
    int64_t k = 0;
    for (; k + kStep <= K; k += kStep) {
      simd::prefetch_stream(row + k, kStep * 2);
      for (int u = 0; u < U; ++u) {
        simd::Vec even, odd;
        simd::load_bf16_pairs(row + k + 2 * u * VW, &even, &odd);
        acc[2 * u] = simd::fma(even, simd::load(x_even + k / 2 + u * VW), acc[2 * u]);
        acc[2 * u + 1] = simd::fma(odd, simd::load(x_odd + k / 2 + u * VW), acc[2 * u + 1]);
      }
    }
    for (; k + VW <= K; k += VW) acc[0] = simd::fma(simd::load_bf16(row + k), simd::load(x + k), acc[0]);
    for (int u = 1; u < 2 * U; ++u) acc[0] = simd::add(acc[0], acc[u]);
    float s = simd::sum(acc[0]);
    for (; k < K; ++k) s += bf16_to_f32(row[k]) * x[k];
    out[n] = s;
  }
}

// note: from kOuterMinRows to 32 activation rows (batched decode), f32 weights are multiplied as outer products
// instead of dot products. The activations are packed transposed, (K, L) with L = one vector of
// rows, and each weight w[n, k] is broadcast straight from memory into an FMA with the vector
// x[0 .. L, k]: a tile of kOuterRows weight rows keeps kOuterRows accumulators, each holding one
// output column for all L rows. There is no horizontal sum at all (the dot-product tile pays one
// per output, a large share when K is only a few hundred), and each weight still crosses the
// memory bus once. The price is a transpose of the tile's outputs on the way out, once per
// kOuterRows x K FMAs. bf16/f16 weights keep the dot-product tile: they cannot be broadcast from
// memory without a conversion per FMA.
#if defined(__AVX512F__)
// dst[j * ld_dst + i] = W::load(src + i * ld_src)[j] for i < rows and j < 16, zeros for rows <= i
// < 16: 16 rows of 16 values transposed through registers (simd::transpose16).
template <class W>
inline void transpose_16x16(float* dst, int64_t ld_dst, const typename W::Stored* src, int64_t ld_src, int64_t rows) {
  simd::Vec block[16];
  for (int64_t i = 0; i < 16; ++i) block[i] = i < rows ? W::load(src + i * ld_src) : simd::zero();
  simd::transpose16(block);
  for (int64_t j = 0; j < 16; ++j) simd::store(dst + j * ld_dst, block[j]);
}
#endif

// Asks for every cache line of [p, p + bytes), the last one too when p is not on a line.
inline void prefetch_lines(const void* p, int64_t bytes) {
  const char* first = static_cast<const char*>(p);
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(first + b);
  if (bytes > 0) __builtin_prefetch(first + bytes - 1);
}

constexpr int kOuterLanes = simd::kWidth;
constexpr int kOuterRows = simd::kWidth >= 16 ? 16 : 8;  // accumulators: 16 of 32 AVX-512 registers

// Packs x[0 .. rows) transposed into xt (K, L); lanes past `rows` are zeros.
void pack_transposed(float* xt, const float* x, int64_t ld_x, int64_t rows, int64_t K) {
  int64_t k0 = 0;
#if defined(__AVX512F__)
  if constexpr (kOuterLanes == 16) {
    for (; k0 + 16 <= K; k0 += 16) transpose_16x16<simd::F32>(xt + k0 * 16, 16, x + k0, ld_x, rows);
  }
#endif
  for (int64_t k = k0; k < K; ++k)
    for (int64_t l = 0; l < kOuterLanes; ++l) xt[k * kOuterLanes + l] = l < rows ? x[l * ld_x + k] : 0.0f;
}

// Weight w[r, k] of a tile, as an address the FMA can take as its memory operand: two pointers
// that move along k (rows 0-7 and 8-15) plus a loop-invariant offset register scaled by 1, 2 or
// 4. With a pointer per row, as the plain `w[r * K + k]` compiles, 16 rows need more registers
// than x86 has and the loop spills them (bench/results/NOTES.md, "Outer products for batched decode").
struct RowOffsets {
  int64_t b1, b3, b5, b7;  // 1, 3, 5 and 7 rows, in bytes
  explicit RowOffsets(int64_t K) : b1(K * 4), b3(3 * b1), b5(5 * b1), b7(7 * b1) {}
};
template <int r>
inline float weight_at(const char* rows0, const char* rows8, const RowOffsets& o) {
  const char* base = r < 8 ? rows0 : rows8;
  int64_t offset = 0;
  switch (r % 8) {
    case 1: offset = o.b1; break;
    case 2: offset = 2 * o.b1; break;
    case 3: offset = o.b3; break;
    case 4: offset = 4 * o.b1; break;
    case 5: offset = o.b5; break;
    case 6: offset = 2 * o.b3; break;
    case 7: offset = o.b7; break;
    default: break;
  }
  return *reinterpret_cast<const float*>(base + offset);
}

template <int... r>
inline void outer_step(simd::Vec* acc, simd::Vec xv, const char* rows0, const char* rows8, const RowOffsets& o,
                       std::integer_sequence<int, r...>) {
  ((acc[r] = simd::fma(simd::set1(weight_at<r>(rows0, rows8, o)), xv, acc[r])), ...);
}

// out[l, r] for l < rows, r < kOuterRows, from xt (K, L) and weight rows w (kOuterRows, K).
// `next`, the following tile of weights, is prefetched into L2 a line per step of k (a tile is
// kOuterRows * K floats, kOuterRows * K / 16 lines): at K = 288 this tile, the next one and xt
// are 18 KB each, more than the 48 KB L1 holds. From L2 the tile's own lines are requested into
// L1 two lines ahead of use, one row per step, instead of all 16 rows missing together every 16
// steps (bench/results/NOTES.md, "Outer products for batched decode").
inline void outer_tile(float* out, int64_t ld_out, int64_t rows, const float* xt, const float* w,
                       int64_t K, const float* next) {
  simd::Vec acc[kOuterRows];
  for (int r = 0; r < kOuterRows; ++r) acc[r] = simd::zero();
  const RowOffsets offsets(K);
  const char* rows0 = reinterpret_cast<const char*>(w);
  const char* rows8 = kOuterRows > 8 ? rows0 + 8 * offsets.b1 : rows0;
  for (int64_t k = 0; k < K; ++k, rows0 += sizeof(float), rows8 += sizeof(float)) {
    if (next != nullptr) __builtin_prefetch(next + k * kOuterRows, 0, 2);
    const int64_t ahead = (k & ~int64_t(15)) + 32;
    if (ahead < K) __builtin_prefetch(w + (k % kOuterRows) * K + ahead);
    outer_step(acc, simd::load(xt + k * kOuterLanes), rows0, rows8, offsets,
               std::make_integer_sequence<int, kOuterRows>());
  }
#if defined(__AVX512F__)
  if constexpr (kOuterRows == 16 && kOuterLanes == 16) {
    simd::transpose16(acc);  // acc[l] lane r = out[l, r]
    for (int64_t l = 0; l < rows; ++l) simd::store(out + l * ld_out, acc[l]);
    return;
  }
#endif
  alignas(64) float columns[kOuterRows][kOuterLanes];  // columns[r][l] = out[l, r]
  for (int r = 0; r < kOuterRows; ++r) simd::store(columns[r], acc[r]);
  for (int64_t l = 0; l < rows; ++l)
    for (int r = 0; r < kOuterRows; ++r) out[l * ld_out + r] = columns[r][l];
}

// note: a last group of only a few rows would still pay every FMA of a full vector of lanes (a
// 12-row batch cost as much as 16). Up to kDotTailRows rows left over after the full groups are
// instead multiplied as dot products (the small-M tile) against each weight tile while it is in
// L1: that costs in proportion to the rows, plus a horizontal sum per output. Continuous
// batching makes such counts common: the classifier runs only on the rows whose logits are
// wanted, which is fewer than the step's rows while prompts are being fed in (measured on AVX2:
// bench/results/NOTES.md; the AVX-512 boundary is the same fraction of the lanes, unmeasured).
constexpr int64_t kDotTailRows = kOuterLanes * 3 / 4;

void outer_f32(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x, const float* w,
           int64_t M, int64_t N, int64_t K) {
  const int64_t tail = M % kOuterLanes;
  const bool dot_tail = tail > 0 && tail <= kDotTailRows && M > kOuterLanes;
  const int64_t tail_row = M - tail;  // the first row of the dot-product tail
  const int64_t groups = dot_tail ? M / kOuterLanes : (M + kOuterLanes - 1) / kOuterLanes;
  // Grows once, then reused: the decode loop makes no allocation after its first step. Sized for
  // the most rows outer takes (kSmallMaxRows) whatever M is, so that a step with more rows than
  // the first (a prompt admitted into a batch) does not grow it again.
  thread_local std::vector<float> packed;
  constexpr int64_t kMostGroups = (kSmallMaxRows + kOuterLanes - 1) / kOuterLanes;
  MINFER_CHECK(groups <= kMostGroups, "outer: ", M, " rows, more than ", kSmallMaxRows);
  packed.resize(static_cast<size_t>(kMostGroups * K * kOuterLanes));
  for (int64_t g = 0; g < groups; ++g)
    pack_transposed(packed.data() + g * K * kOuterLanes, x + g * kOuterLanes * ld_x, ld_x,
                    std::min<int64_t>(kOuterLanes, M - g * kOuterLanes), K);
  const float* xt = packed.data();
  // note: one block of weight rows per thread, so that each thread's prefetching runs through
  // its whole block (with 8 blocks per thread, as the matrix-vector kernel splits, the first tile
  // of every block arrives unprefetched, and the small matrices of a layer lose a fifth). Blocks
  // are still claimed from the pool's counter, so a descheduled worker's block is taken by the
  // caller.
  const int64_t grain = (N / kOuterRows + pool.size() - 1) / pool.size() * kOuterRows;
  pool.parallel_for(N, std::max<int64_t>(grain, kOuterRows), [&](int64_t n0, int64_t n1) {
    int64_t n = n0;
    // The first tile of a chunk has no predecessor to prefetch it: ask for all its lines at once,
    // so that the misses overlap instead of arriving 16 rows in lockstep.
    if (n + kOuterRows <= n1)
      prefetch_lines(w + n * K, kOuterRows * K * int64_t(sizeof(float)));
    for (; n + kOuterRows <= n1; n += kOuterRows) {
      const float* tile = w + n * K;
      const float* next = n + 2 * kOuterRows <= n1 ? tile + kOuterRows * K : nullptr;
      for (int64_t g = 0; g < groups; ++g, next = nullptr)
        outer_tile(out + g * kOuterLanes * ld_out + n, ld_out, std::min<int64_t>(kOuterLanes, M - g * kOuterLanes),
                   xt + g * K * kOuterLanes, tile, K, next);
      if (dot_tail)
        small_m_rows<simd::F32>(out + tail_row * ld_out, ld_out, x + tail_row * ld_x, ld_x, w, tail, n,
                                n + kOuterRows, K);
    }
    if (n < n1) small_m_rows<simd::F32>(out, ld_out, x, ld_x, w, M, n, n1, K);
  });
}

#if defined(MINFER_PANELS)
// note: prefill's products (more than 32 rows) multiply panels of two vectors of weight rows (16
// with AVX2, 32 with AVX-512), packed transposed (kPanelDepth, kPanelCols) a slice at a time (f16
// and bf16 widened to f32 as they are packed; dequantized tiles come through matmul_f32_on_this_thread) so
// that one k of the panel's columns is two vector loads, by the activations in register tiles of
// kPanelRows rows: per k, two panel loads and kPanelRows broadcasts of x[m, k] feed 2 kPanelRows
// independent FMAs, and the outputs are stored as they are, with no transpose. AVX2 takes 6 rows
// (12 FMAs in flight, as many as two FMA units of four or five cycles' latency need, in 16
// registers); AVX-512 8 (16 accumulators of its 32 registers). The outer-product tile keeps 8
// accumulators (16 with AVX-512) and needs a broadcast load per FMA; Eigen's blocked GEMM, called per slice of weight
// rows, repacks the activations each time (the panels against both: bench/results/NOTES.md, "f32
// prefill on AVX2", "The panels for f16, bf16 and Q8_0 on AVX2", "The panels on AVX-512").
constexpr int kPanelCols = 2 * simd::kWidth;                // weight rows per panel: the output's columns
constexpr int kPanelRows = simd::kWidth == 16 ? 8 : 6;      // activation rows per register tile
// note: a panel is packed and multiplied kPanelDepth values of k at a time, so that the slice every
// register tile reads (256 x 32 floats, 32 KiB, with AVX-512; 16 KiB with AVX2) stays in a 48 KiB L1
// while all M rows pass over it; a whole panel of K = 768 (96 KiB) was read from L2 by every tile.
// The slices after the first add to the outputs. 256 was chosen on a 48 KiB L1 (bench/results/
// NOTES.md, "The panels in slices of k, packed through registers"). In a 32 KiB L1 (Zen 2, Zen 4)
// an AVX-512 slice leaves no room for the activations and an AVX2 one half; the slices are not
// measured there.
constexpr int64_t kPanelDepth = 256;

// Column c of a packed panel, values [from, to) of its slice: row[k] widened a vector at a time,
// or zeros where row is null (past the panel's weight rows).
template <class W>
void pack_column(float* panel, int64_t c, const typename W::Stored* row, int64_t from, int64_t to) {
  if (row == nullptr) {
    for (int64_t k = from; k < to; ++k) panel[k * kPanelCols + c] = 0.0f;
    return;
  }
  alignas(64) float wide[simd::kWidth];
  int64_t k = from;
  for (; k + simd::kWidth <= to; k += simd::kWidth) {
    simd::store(wide, W::load(row + k));
    for (int j = 0; j < simd::kWidth; ++j) panel[(k + j) * kPanelCols + c] = wide[j];
  }
  for (; k < to; ++k) panel[k * kPanelCols + c] = W::scalar(row + k);
}

// Packs k0 .. k0 + depth of weight rows w[0 .. cols) (cols, K) transposed into panel
// (depth, kPanelCols), widened to f32 a vector at a time; columns past `cols` are zeros.
// note: with AVX-512, 16 rows x 16 values of k go through registers (simd::transpose16) instead of
// pack_column's store per value, whose cost perf showed in the f32 products (bench/results/NOTES.md,
// "The panels in slices of k, packed through registers").
template <class W>
void pack_panel(float* panel, const typename W::Stored* w, int64_t cols, int64_t K, int64_t k0, int64_t depth) {
  int64_t c0 = 0, k_vectors = 0;
#if defined(__AVX512F__)
  if constexpr (simd::kWidth == 16) {
    k_vectors = depth / 16 * 16;
    for (; c0 + 16 <= cols; c0 += 16)
      for (int64_t k = 0; k < k_vectors; k += 16)
        transpose_16x16<W>(panel + k * kPanelCols + c0, kPanelCols, w + c0 * K + k0 + k, K, 16);
  }
#endif
  for (int64_t c = 0; c < kPanelCols; ++c) {
    const typename W::Stored* row = c < cols ? w + c * K + k0 : nullptr;
    pack_column<W>(panel, c, row, c < c0 ? k_vectors : 0, depth);  // what the transposes left
  }
}

// out[r, 0 .. cols) (= or, with `add`, +=) for r < R, from activation rows x (R, depth) and a
// packed panel (depth, kPanelCols).
template <int R>
void panel_tile(float* out, int64_t ld_out, const float* x, int64_t ld_x, const float* panel, int64_t depth,
                int64_t cols, bool add) {
  simd::Vec acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = simd::zero();
  for (int64_t k = 0; k < depth; ++k) {
    const simd::Vec w0 = simd::load(panel + k * kPanelCols), w1 = simd::load(panel + k * kPanelCols + simd::kWidth);
    for (int r = 0; r < R; ++r) {
      const simd::Vec xv = simd::set1(x[r * ld_x + k]);
      acc[r][0] = simd::fma(xv, w0, acc[r][0]);
      acc[r][1] = simd::fma(xv, w1, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(64) float row[kPanelCols];  // a partial panel's outputs: its lanes past cols are not stored
    float* dst = cols == kPanelCols ? out + r * ld_out : row;
    if (dst == row) {
      std::fill(row, row + kPanelCols, 0.0f);
      if (add) std::copy(out + r * ld_out, out + r * ld_out + cols, row);
    }
    simd::store(dst, add ? simd::add(acc[r][0], simd::load(dst)) : acc[r][0]);
    simd::store(dst + simd::kWidth, add ? simd::add(acc[r][1], simd::load(dst + simd::kWidth)) : acc[r][1]);
    if (dst == row) std::copy(row, row + cols, out + r * ld_out);
  }
}

// The tile of `rows` < R activation rows: R - 1 rows, or fewer.
template <int R>
void panel_tail(int rows, float* out, int64_t ld_out, const float* x, int64_t ld_x, const float* panel, int64_t depth,
                int64_t cols, bool add) {
  if constexpr (R > 1) {
    if (rows == R - 1) return panel_tile<R - 1>(out, ld_out, x, ld_x, panel, depth, cols, add);
    panel_tail<R - 1>(rows, out, ld_out, x, ld_x, panel, depth, cols, add);
  }
}

// out[0 .. M, 0 .. cols) from x (M, K) and weight rows w (cols, K), cols <= kPanelCols: a slice of
// the panel packed into `panel` (kPanelDepth * kPanelCols floats), then every register tile of
// activation rows, slice after slice (K = 0: zeros). While the tiles compute, the panel's next
// slice is requested, one weight row per tile (all of it when M >= kPanelRows * kPanelCols, 256
// rows with AVX-512 and 96 with AVX2; the first rows of it below that).
// note: packing a slice reads up to 1 KiB (256 f32 values) from each of the panel's rows, too short
// a stream for the hardware prefetcher, so the next slice is asked for while the tiles compute;
// asking for the next panel's first slice too gained nothing more (bench/results/NOTES.md, "The
// panels in slices of k, packed through registers").
template <class W>
void panel_product(float* out, int64_t ld_out, const float* x, int64_t ld_x, const typename W::Stored* w,
                   int64_t M, int64_t cols, int64_t K, float* panel) {
  for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += kPanelDepth) {
    const int64_t depth = std::min(kPanelDepth, K - k0), next = k0 + depth;
    const bool add = k0 > 0;
    pack_panel<W>(panel, w, cols, K, k0, depth);
    int64_t m = 0;
    for (int64_t c = 0; m + kPanelRows <= M; m += kPanelRows, ++c) {
      if (c < cols && next < K)
        prefetch_lines(w + c * K + next, std::min(kPanelDepth, K - next) * int64_t(sizeof(typename W::Stored)));
      panel_tile<kPanelRows>(out + m * ld_out, ld_out, x + m * ld_x + k0, ld_x, panel, depth, cols, add);
    }
    if (m < M)
      panel_tail<kPanelRows>(int(M - m), out + m * ld_out, ld_out, x + m * ld_x + k0, ld_x, panel, depth, cols, add);
  }
}

// The panel buffer of the calling thread, kPanelDepth * kPanelCols floats, aligned for its loads.
float* panel_buffer() {
  alignas(64) thread_local float panel[kPanelDepth * kPanelCols];
  return panel;
}

template <class W>
void panels_of(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x, const typename W::Stored* w,
            int64_t M, int64_t N, int64_t K) {
  const int64_t n_panels = (N + kPanelCols - 1) / kPanelCols;
  pool.parallel_for(n_panels, 1, [&](int64_t p0, int64_t p1) {
    float* buffer = panel_buffer();
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n0 = p * kPanelCols;
      panel_product<W>(out + n0, ld_out, x, ld_x, w + n0 * K, M, std::min<int64_t>(kPanelCols, N - n0), K, buffer);
    }
  });
}
#endif

// out (M, N) = x (M, K) times w (N, K) transposed, by Eigen's blocked GEMM on the calling thread.
void eigen_product(float* out, int64_t ld_out, const float* x, int64_t ld_x, const float* w, int64_t M, int64_t N,
                   int64_t K) {
  Eigen::Map<const RowMajor, 0, Stride> X(x, M, K, Stride(ld_x));
  Eigen::Map<const RowMajor> Wt(w, N, K);
  Eigen::Map<RowMajor, 0, Stride> O(out, M, N, Stride(ld_out));
  O.noalias() = X * Wt.transpose();
}

// Rows of weights widened per step on the GEMM path: 64 rows of K floats stay in L2.
constexpr int64_t kGemmTileRows = 64;

template <class W>
void gemm_of(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x,
          const typename W::Stored* w, int64_t M, int64_t N, int64_t K) {
  pool.parallel_for(N, kGemmTileRows, [&](int64_t n0, int64_t n1) {
    if constexpr (std::is_same_v<W, simd::F32>) {
      eigen_product(out + n0, ld_out, x, ld_x, w + n0 * K, M, n1 - n0, K);
    } else {
      // Grows once, then reused; aligned so that every thread computes with the same alignment.
      thread_local std::vector<float, Eigen::aligned_allocator<float>> tile;
      tile.resize(static_cast<size_t>(kGemmTileRows * K));
      for (int64_t t0 = n0; t0 < n1; t0 += kGemmTileRows) {
        int64_t rows = std::min(kGemmTileRows, n1 - t0);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t k = 0; k < K; ++k) tile[r * K + k] = W::scalar(w + (t0 + r) * K + k);
        eigen_product(out + t0, ld_out, x, ld_x, tile.data(), M, rows, K);
      }
    }
  });
}

}  // namespace

// Each of the M activation rows against all N weight rows, as one_row_bf16 computes a lone row;
// a thread's 16 weight rows stay in cache while the M rows pass over them.
void one_row_bf16_blocks(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x,
                         const uint16_t* w, int64_t M, int64_t N, int64_t K) {
  // Grows once, then reused; the workers get the caller's by pointer.
  thread_local std::vector<float> split;
  split.resize(static_cast<size_t>(M * K));
  for (int64_t m = 0; m < M; ++m) {
    float* x_even = split.data() + m * K;
    float* x_odd = x_even + K / 2;
    for (int64_t i = 0; i < K / 2; ++i) {
      x_even[i] = x[m * ld_x + 2 * i];
      x_odd[i] = x[m * ld_x + 2 * i + 1];
    }
  }
  const float* halves = split.data();
  pool.parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t m = 0; m < M; ++m)
      one_row_bf16(out + m * ld_out, x + m * ld_x, halves + m * K, halves + m * K + K / 2, w, n0, n1, K);
  });
}

void small_m(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w, DType w_dtype,
             int64_t M, int64_t N, int64_t K) {
  simd::dispatch_weight_type(w_dtype, [&](auto type) {
    using W = decltype(type);
    const auto* weights = static_cast<const typename W::Stored*>(w);
    // note: 16-row grains keep each thread's block of weights a contiguous stream.
    pool.parallel_for(N, 16, [&](int64_t n0, int64_t n1) { small_m_rows<W>(out, ld_out, x, ld_x, weights, M, n0, n1, K); });
  });
}

void outer(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x, const float* w, int64_t M,
           int64_t N, int64_t K) {
  outer_f32(pool, out, ld_out, x, ld_x, w, M, N, K);
}

#if defined(MINFER_PANELS)
void panels(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w, DType w_dtype,
            int64_t M, int64_t N, int64_t K) {
  simd::dispatch_weight_type(w_dtype, [&](auto type) {
    using W = decltype(type);
    panels_of<W>(pool, out, ld_out, x, ld_x, static_cast<const typename W::Stored*>(w), M, N, K);
  });
}
#endif

void gemm(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w, DType w_dtype,
          int64_t M, int64_t N, int64_t K) {
  simd::dispatch_weight_type(w_dtype, [&](auto type) {
    using W = decltype(type);
    gemm_of<W>(pool, out, ld_out, x, ld_x, static_cast<const typename W::Stored*>(w), M, N, K);
  });
}

void matmul_f32_on_this_thread(float* out, int64_t ld_out, const float* x, int64_t ld_x, const float* w, int64_t M,
                               int64_t N, int64_t K) {
  if (M <= 0 || N <= 0) return;
#if defined(MINFER_PANELS)
  float* buffer = panel_buffer();
  for (int64_t n0 = 0; n0 < N; n0 += kPanelCols)
    panel_product<simd::F32>(out + n0, ld_out, x, ld_x, w + n0 * K, M, std::min<int64_t>(kPanelCols, N - n0), K, buffer);
#else
  eigen_product(out, ld_out, x, ld_x, w, M, N, K);
#endif
}

}  // namespace minfer::cpu
