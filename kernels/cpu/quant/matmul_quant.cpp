// Matrix products with quantized weights: Q8_0 is 34 bytes per 32 weights, Q4_K 144 per 256, so
// a decode step reads 3.8 to 7 times fewer bytes than with f32 weights, and decode, being
// memory-bound, can run that much faster if the arithmetic keeps up with the stream.
//
// Decode, and batched decode of a few sequences: the activations are quantized once per call, in
// the block type llama.cpp pairs with the weight type (kernels/cpu/quant/quant_dot.h), and each
// weight row meets up to four activation rows in integer dot products (quant_dot*.cpp), so a
// weight is read once per four sequences and costs a handful of instructions per block. From
// quant_gemm_min_rows(w) rows (5 for Q4_1 with VNNI, 10 for Q8_0, 24 for Q2_K: quant_gemm.cpp
// says how they were measured) the integer GEMM below is faster, and takes them: at 16 rows of
// SmolLM2's Q4_1 it runs a product 2.4x as fast, and batched decode of 16 sequences 2.36x.
//
// note: widening the weights to f32 in registers against f32 activations (exact, no second
// quantization) streams as fast at one row but falls behind from a few rows on. The integer path
// costs an NMSE of about 1.6e-5 per product for Q8_0; llama.cpp makes the same choice.
//
// From there (prefill, larger batches), the activations are rounded the same way, so both paths
// multiply the same codes, and then:
//   - with AVX-512 VNNI, the integer GEMM of kernels/cpu/quant/quant_gemm.h multiplies the codes in
//     register tiles of 4 rows x 32 columns; with AVX2, in tiles of 2 rows x 16 columns (every
//     type but Q8_0);
//   - Q8_0 on AVX2 (in the file's layout: the backend packs it, kernels/cpu/quant/packed.h), above
//     32 rows, each thread dequantizes 256 weight rows at a time to f32
//     (kernels/cpu/quant/dequantize.h, vector code bit for bit as dequantize_row) and multiplies
//     them with the rounded activations by the f32 prefill kernel on that thread
//     (matmul_f32_on_this_thread: the panels), where the dequantization is paid once for all M rows;
//   - without AVX2, where neither the integer GEMM nor the packed layout exists, the dot products
//     take every M, so that a row's result never depends on the batch (below).
//
// note: each choice above was measured (bench/results/NOTES.md, "Q8_0 products" and "Prefill with
// quantized weights"): the integer GEMM runs pp256 2.67x (Q4_K_M) and 3.00x (Q8_0) as fast as the
// dequantized tiles on a Zen 4, since vpdpbusd does 64 multiply-adds of bytes where an f32 FMA does
// 16; tiles of 256 rows beat smaller ones; decode's dot products would prefill 2-2.6x slower than
// the tiles, because they reload every activation for each weight row.
//
// note: the GEMM sums each block's integer product whole before scaling it, the dot products keep
// per-lane partial sums to the end, so the two round apart in the last bits of a sum, and a
// token's logits depend on how many rows shared its product: a prompt read in one pass or a row at
// a time, a sequence decoded alone or in a batch of 16. At a near-tie that flips a greedy token
// (docs/serving.md counts how often).
// batch_invariant sends every M to the dot products instead (pp256 at 0.29x the tokens/s there).
// The packed layout (kernels/cpu/quant/packed.h) serves every M with the GEMM's arithmetic, so the
// backend packs the types it can; builds without AVX2 have neither it nor the GEMM, and take the
// dot products for every M by default: they give a row the same bits whatever the rows of a call
// (tests/isa/test_packed.cpp checks both), at the dot products' prefill speed.
//
// note: rounding the activations is what llama.cpp's CPU backend does for every product with
// quantized weights, so `minfer perplexity` agrees with llama-perplexity's, at the price of a
// larger KL divergence from f32 than the weights alone cause (bench/results/NOTES.md).
#include "kernels/cpu/quant/matmul_quant.h"

#include <Eigen/Core>
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/quants.h"
#include "kernels/cpu/quant/dequantize.h"
#include "kernels/cpu/quant/packed.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant/quant_dot.h"
#include "kernels/cpu/quant/quant_gemm.h"

namespace minfer::cpu {

namespace {

constexpr int64_t kSmallMaxRows = 32;  // the dot products' rows where the integer GEMM does not run
constexpr int64_t kTileRows = 256;     // weight rows dequantized per step of the GEMM path (see the top)
constexpr int64_t kMinTileRows = 32;   // the fewest, when a matrix has too few rows for every thread
constexpr int kDotRows = 4;            // activation rows per pass over a weight row

// One row of quantized activations back to f32: d * q per block.
void round_trip_row(DType w, float* dst, const uint8_t* act, int64_t K) {
  with_act_blocks(w, act, [&](const auto* blocks, int64_t block) {
    for (int64_t i = 0; i < K; ++i) dst[i] = blocks[i / block].d * float(blocks[i / block].q[i % block]);
  });
}

// The M rows of x quantized for weights of type w, row_bytes each by `quantize`, in a buffer that
// grows once, then is reused (no allocation per step).
// note: the workers see their own thread_local vectors, so they get the caller's by pointer.
template <class Quantize>
uint8_t* quantized_rows(const float* x, int64_t ld_x, int64_t M, int64_t K, size_t row_bytes, Quantize&& quantize) {
  thread_local std::vector<uint8_t> buffer;
  if (buffer.size() < row_bytes * size_t(M)) buffer.resize(row_bytes * size_t(M));
  for (int64_t m = 0; m < M; ++m) quantize(buffer.data() + size_t(m) * row_bytes, x + m * ld_x, K);
  return buffer.data();
}
// As quantize_activations writes them (prefill's products).
uint8_t* quantized_rows(DType w, const float* x, int64_t ld_x, int64_t M, int64_t K) {
  return quantized_rows(x, ld_x, M, K, act_row_bytes(w, K),
                        [w](void* dst, const float* row, int64_t n) { quantize_activations(w, dst, row, n); });
}

void small_rows(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w,
                DType w_dtype, int64_t M, int64_t N, int64_t K) {
  const size_t row_bytes = dot_act_row_bytes(w_dtype, K);
  const uint8_t* act = quantized_rows(x, ld_x, M, K, row_bytes, [w_dtype](void* dst, const float* row, int64_t n) {
    quantize_dot_activations(w_dtype, dst, row, n);
  });
  const DotRows dot = dot_rows_for(w_dtype);
  const int64_t nb = K / dtype_block(w_dtype), w_row_bytes = nb * dtype_block_bytes(w_dtype);
  pool.parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const char* row = static_cast<const char*>(w) + n * w_row_bytes;
      for (int64_t m = 0; m < M; m += kDotRows)
        dot(out + m * ld_out + n, ld_out, row, act + size_t(m) * row_bytes, row_bytes,
            int(std::min<int64_t>(kDotRows, M - m)), nb);
    }
  });
}

void gemm(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w, DType w_dtype,
          int64_t M, int64_t N, int64_t K) {
  const size_t row_bytes = act_row_bytes(w_dtype, K);
  const uint8_t* act = quantized_rows(w_dtype, x, ld_x, M, K);
  // The activations rounded as the small-row kernel rounds them: grows once, then reused.
  thread_local std::vector<float, Eigen::aligned_allocator<float>> rounded;
  rounded.resize(static_cast<size_t>(M * K));
  float* xr = rounded.data();
  pool.parallel_for(M, 8, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) round_trip_row(w_dtype, xr + m * K, act + size_t(m) * row_bytes, K);
  });
  const int64_t w_row_bytes = K / dtype_block(w_dtype) * dtype_block_bytes(w_dtype);
  // Up to kTileRows a tile, fewer where that would leave threads idle (768 rows on 16 threads).
  const int64_t tile_rows = std::clamp<int64_t>((N + pool.size() - 1) / pool.size(), kMinTileRows, kTileRows);
  pool.parallel_for(N, tile_rows, [&](int64_t n0, int64_t n1) {
    // Grows once, then reused; aligned so that every thread computes with the same alignment.
    thread_local std::vector<float, Eigen::aligned_allocator<float>> tile;
    tile.resize(static_cast<size_t>(kTileRows * K));
    for (int64_t t0 = n0; t0 < n1; t0 += tile_rows) {
      const int64_t rows = std::min(tile_rows, n1 - t0);
      dequantize_f32(w_dtype, tile.data(), static_cast<const char*>(w) + t0 * w_row_bytes, static_cast<size_t>(rows * K));
      matmul_f32_on_this_thread(out + t0, ld_out, xr, K, tile.data(), M, rows, K);
    }
  });
}

void integer_gemm(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w,
                  DType w_dtype, int64_t M, int64_t N, int64_t K) {
  quant_gemm(pool, out, ld_out, quantized_rows(w_dtype, x, ld_x, M, K), w, w_dtype, M, N, K);
}

}  // namespace

void matmul_quant(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w,
                  DType w_dtype, int64_t M, int64_t N, int64_t K, bool batch_invariant) {
  MINFER_CHECK(is_quantized(w_dtype), "matmul_quant: ", dtype_name(w_dtype), " is not quantized");
  MINFER_CHECK(K % dtype_block(w_dtype) == 0, dtype_name(w_dtype), " matmul: K = ", K, " is not whole blocks of ",
               dtype_block(w_dtype));
  if (M <= 0 || N <= 0) return;
  const bool integer = quant_gemm_supports(w_dtype), invariant = batch_invariant || (!integer && !packs(w_dtype));
  if (invariant || M < (integer ? quant_gemm_min_rows(w_dtype) : kSmallMaxRows + 1))
    small_rows(pool, out, ld_out, x, ld_x, w, w_dtype, M, N, K);
  else if (integer)
    integer_gemm(pool, out, ld_out, x, ld_x, w, w_dtype, M, N, K);
  else
    gemm(pool, out, ld_out, x, ld_x, w, w_dtype, M, N, K);
}

}  // namespace minfer::cpu
