// The driver of the packed layout (kernels/cpu/quant/packed.h): it quantizes the activations once
// per row and cuts them into runs (act_runs.h), then hands tiles of weight groups to the type's
// kernel (packed_tile.h) on the pool's threads, and multiplies the rows past the last group itself,
// in the file's layout, with the same arithmetic in plain C++ (matmul_run_order).
//
// note: the threads share out tiles of weight groups, never activation rows, so every output
// element is one thread's, formed by one tile call; a tile walks all M rows (max_rows at a time)
// while its groups stay in L1/L2, which is what prefill reuses. Decode and batched decode (M up
// to kStreamRows, and no more than a tile's rows) split the tiles into one even chunk per thread:
// the weights are their whole cost, and a chunk per thread streams each thread's share from one
// place. More rows take the tiles one at a time, whichever thread is free.
#include "kernels/cpu/quant/packed.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/quants_blocks.h"
#include "kernels/cpu/quant/act_runs.h"
#include "kernels/cpu/quant/packed_tile.h"
#include "kernels/cpu/quant/quant_unpack.h"

namespace minfer::cpu {

namespace {

[[maybe_unused]] constexpr int64_t kStreamRows = 8;  // the most rows a product splits into one chunk per thread

const packed::TypeKernels* kernels_for(DType t) {
  if (!is_quantized(t)) return nullptr;
  return is_k_quant(t) ? packed::k_kernels(t) : packed::legacy_kernels(t);
}

int64_t row_bytes_of(DType t, int64_t K) {
  MINFER_CHECK(K % dtype_block(t) == 0, dtype_name(t), " packed: K = ", K, " is not whole blocks of ",
               dtype_block(t));
  return K / dtype_block(t) * dtype_block_bytes(t);
}

#if defined(__AVX2__) && defined(__FMA__)
// One weight row's codes as unsigned bytes (K) and its runs' maps (runs), for run_order_rows.
struct RowScratch {
  uint8_t* codes;
  unpack::Affine* maps;
};
// The calling thread's, grown once to the widest row, then reused.
// note: taken by the thread that calls the product and handed to the worker that takes the rows
// past the last group, not a buffer of each worker's own: which worker takes them changes from call
// to call, and a worker's first time would allocate in the decode loop.
RowScratch row_scratch(int64_t K, int64_t runs) {
  thread_local std::vector<uint8_t> codes;
  thread_local std::vector<unpack::Affine> maps;
  if (codes.size() < size_t(K)) codes.resize(size_t(K));
  if (maps.size() < size_t(runs)) maps.resize(size_t(runs));
  return {codes.data(), maps.data()};
}

// Rows of the file's layout (n_rows of them, row_bytes apart at w) times the M activation rows of
// a, one element at a time in run order (packed.h's top): out(m, n), rows ld_out apart.
void run_order_rows(const Activations& a, DType t, const uint8_t* w, int64_t n_rows, int64_t M, int64_t K,
                    float* out, int64_t ld_out, const RowScratch& scratch) {
  const int G = unpack::affine_run(t), shift = code_shift(t);
  const int64_t runs = a.runs, row_bytes = row_bytes_of(t, K);
  uint8_t* codes = scratch.codes;
  unpack::Affine* maps = scratch.maps;
  for (int64_t n = 0; n < n_rows; ++n) {
    blocks::dispatch_block(t, [&](auto tag) {
      using Block = typename decltype(tag)::type;
      const auto* b = reinterpret_cast<const Block*>(w + n * row_bytes);
      int64_t k = 0;
      for (int64_t i = 0; i < K / blocks::Traits<Block>::kWeights; ++i)
        unpack::codes(b[i], [&](__m256i q, unpack::Affine a0, unpack::Affine a1) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + k),
                              _mm256_add_epi8(q, _mm256_set1_epi8(static_cast<char>(shift))));
          for (int h = 0; h < 32 / G; ++h) maps[(k + h * G) / G] = h == 0 ? a0 : a1;
          k += 32;
        });
    });
    for (int64_t m = 0; m < M; ++m) {
      const int8_t* x = a.q + m * K;
      float acc = 0.0f;
      for (int64_t g = 0; g < runs; ++g) {
        int32_t s = shift != 0 ? -a.shifted[m * runs + g] : 0;
        for (int64_t k = g * G; k < (g + 1) * G; ++k) s += int32_t(codes[k]) * int32_t(x[k]);
        const unpack::Affine& map = maps[g];
        acc = std::fma(float(s), map.dl * a.dx[m * runs + g], acc);
        if (shift == 0) acc = std::fma(-map.ml, a.cx[m * runs + g], acc);
      }
      out[m * ld_out + n] = acc;
    }
  }
}
#endif

}  // namespace

bool packs(DType t) { return kernels_for(t) != nullptr; }

void pack_rows(DType t, void* dst, const void* src, int64_t N, int64_t K) {
  const packed::TypeKernels* kernels = kernels_for(t);
  MINFER_CHECK(kernels != nullptr, "pack_rows: no packed layout for ", dtype_name(t));
  const int64_t row_bytes = row_bytes_of(t, K), nb = K / dtype_block(t), groups = N / kPackRows;
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t g = 0; g < groups; ++g)
    kernels->pack_group(d + g * kPackRows * row_bytes, s + g * kPackRows * row_bytes, row_bytes, nb);
  const int64_t done = groups * kPackRows * row_bytes;
  std::memcpy(d + done, s + done, size_t((N - groups * kPackRows) * row_bytes));
}

void unpack_row(DType t, void* dst_row, const void* packed, int64_t row, int64_t N, int64_t K) {
  const packed::TypeKernels* kernels = kernels_for(t);
  MINFER_CHECK(kernels != nullptr, "unpack_row: no packed layout for ", dtype_name(t));
  MINFER_CHECK(row >= 0 && row < N, "unpack_row: row ", row, " of ", N);
  const int64_t row_bytes = row_bytes_of(t, K), g = row / kPackRows;
  const auto* p = static_cast<const uint8_t*>(packed);
  if (g < N / kPackRows)
    kernels->unpack_row(static_cast<uint8_t*>(dst_row), p + g * kPackRows * row_bytes, int(row % kPackRows),
                        K / dtype_block(t));
  else
    std::memcpy(dst_row, p + row * row_bytes, size_t(row_bytes));
}

#if defined(__AVX2__) && defined(__FMA__)

void packed::strip_rows(const packed::Tile& t, DType type, packed::UnpackToStrip unpack) {
  // Grow once, then reused. A single group leaves the strip's columns 16..31 as a previous call
  // (or the zeroed resize) left them: quant_strip_rows may read them and writes nothing of them.
  thread_local std::vector<uint8_t> codes;
  thread_local std::vector<float> maps;
  const int64_t runs = t.K / unpack::affine_run(type);
  float* scale = aligned_64(maps, size_t(2 * runs * kQuantStripCols));
  const QuantStrip s{aligned_64(codes, size_t(t.K * kQuantStripCols)), scale, scale + runs * kQuantStripCols};
  for (int n = 0; n < t.groups; ++n) unpack(t.w + n * t.group_bytes, t.K, n, s);
  const Activations& a = *t.a;
  const Activations rows{a.q + t.m * t.K, a.dx + t.m * a.runs, a.shifted + t.m * a.runs, a.cx + t.m * a.runs, a.runs};
  quant_strip_rows(type, s, rows, t.rows, t.K, t.out, t.ld_out, kPackRows * t.groups);
}

void matmul_packed(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w,
                   DType t, int64_t M, int64_t N, int64_t K) {
  const packed::TypeKernels* kernels = kernels_for(t);
  MINFER_CHECK(kernels != nullptr, "matmul_packed: no packed layout for ", dtype_name(t));
  const int64_t row_bytes = row_bytes_of(t, K);
  if (M <= 0 || N <= 0) return;
  const Activations a = quantize_runs(pool, t, x, ld_x, M, K, unpack::affine_run(t), code_shift(t));
  const int64_t groups = N / kPackRows, group_bytes = kPackRows * row_bytes;
  const int64_t tiles = (groups + kernels->max_groups - 1) / kernels->max_groups;
  const bool tail = N % kPackRows != 0;  // one more unit of work: the rows past the last group
  const int64_t units = tiles + (tail ? 1 : 0);
  // One pass over the weights (decode, batched decode): one even chunk per thread (see the top).
  const bool streaming = M <= std::min<int64_t>(kernels->max_rows, kStreamRows);
  const int64_t grain = streaming ? (units + pool.size() - 1) / pool.size() : 1;
  const auto* wp = static_cast<const uint8_t*>(w);
  const RowScratch scratch = tail ? row_scratch(K, a.runs) : RowScratch{nullptr, nullptr};
  pool.parallel_for(units, grain, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      if (u == tiles) {
        const int64_t n0 = groups * kPackRows;
        run_order_rows(a, t, wp + n0 * row_bytes, N - n0, M, K, out + n0, ld_out, scratch);
        continue;
      }
      const int64_t g0 = u * kernels->max_groups;
      packed::Tile tile{wp + g0 * group_bytes, group_bytes, int(std::min<int64_t>(kernels->max_groups, groups - g0)),
                        &a, 0, 0, K, nullptr, ld_out};
      for (int64_t m = 0; m < M; m += kernels->max_rows) {
        tile.m = m;
        tile.rows = int(std::min<int64_t>(kernels->max_rows, M - m));
        tile.out = out + m * ld_out + g0 * kPackRows;
        kernels->tile(tile);
      }
    }
  });
}

void matmul_run_order(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w,
                      DType t, int64_t M, int64_t N, int64_t K) {
  MINFER_CHECK(is_quantized(t), "matmul_run_order: ", dtype_name(t), " is not quantized");
  row_bytes_of(t, K);  // checks K
  if (M <= 0 || N <= 0) return;
  const Activations a = quantize_runs(pool, t, x, ld_x, M, K, unpack::affine_run(t), code_shift(t));
  run_order_rows(a, t, static_cast<const uint8_t*>(w), N, M, K, out, ld_out, row_scratch(K, a.runs));
}

#else

void matmul_packed(ThreadPool&, float*, int64_t, const float*, int64_t, const void*, DType t, int64_t, int64_t,
                   int64_t) {
  MINFER_CHECK(false, "matmul_packed: no packed layout for ", dtype_name(t), " in a build without AVX2");
}

void matmul_run_order(ThreadPool&, float*, int64_t, const float*, int64_t, const void*, DType t, int64_t, int64_t,
                      int64_t) {
  MINFER_CHECK(false, "matmul_run_order: ", dtype_name(t), " needs AVX2 (quant_unpack.h)");
}

#endif

}  // namespace minfer::cpu
