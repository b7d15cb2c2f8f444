// The quantized dot products (kernels/cpu/quant/quant_dot.h) and prefill's products with quantized
// weights (kernels/cpu/quant/matmul_quant.h: the integer GEMM with AVX-512 VNNI or AVX2, the dequantized
// tiles elsewhere and for Q8_0 on AVX2) against the same sums in double over the dequantized
// weights and activations; bf16 decode (kernels/cpu/tuned/matmul_tuned.cpp's one_row_bf16) and f16/bf16
// prefill (the panels) against sums in double; batch-invariant products row by row against rows
// alone. This file is built four times (tests/CMakeLists.txt): minfer_quant_dot_native, _avx2 (AVX2
// only), _scalar (no SIMD) and _avx512 (AVX-512 with VNNI and VBMI, run only on a CPU that has
// them), so a machine with AVX-512 checks every path, and an AVX2 machine all but the AVX-512 ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "core/quants.h"
#include "core/threads.h"
#include "kernels/cpu/quant/dequantize.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant/quant_dot.h"
#include "kernels/cpu/quant/quant_gemm.h"
#include "tests/isa/random_blocks.h"

namespace minfer::cpu {
namespace {

// The activations as the kernel sees them, dequantized.
std::vector<double> act_values(DType t, const std::vector<uint8_t>& act, int64_t K) {
  std::vector<double> v(static_cast<size_t>(K));
  if (is_k_quant(t)) {
    const auto* a = reinterpret_cast<const ActQ8_K*>(act.data());
    for (int64_t k = 0; k < K; ++k) v[size_t(k)] = double(a[k / kQK].d) * a[k / kQK].q[k % kQK];
  } else if (t == DType::q4_1 || t == DType::q5_1) {
    const auto* a = reinterpret_cast<const ActQ8_1*>(act.data());
    for (int64_t k = 0; k < K; ++k) v[size_t(k)] = double(a[k / 32].d) * a[k / 32].q[k % 32];
  } else {
    const auto* a = reinterpret_cast<const ActQ8_0*>(act.data());
    for (int64_t k = 0; k < K; ++k) v[size_t(k)] = double(a[k / 32].d) * a[k / 32].q[k % 32];
  }
  return v;
}

void check_type(DType t, int64_t nb, bool edge, uint32_t seed) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " nb=" + std::to_string(nb) + (edge ? " edge" : ""));
  std::mt19937 rng(seed);
  const int64_t K = nb * dtype_block(t);
  const std::vector<uint8_t> w = random_blocks(t, nb, rng, edge);
  std::vector<float> wf(static_cast<size_t>(K));
  dequantize_row(t, wf.data(), w.data(), size_t(K));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr int kRows = 4;
  // Rows spaced apart, as a caller may space them, in the layout decode reads (ActQ8_0x4 for Q4_0
  // on AVX-512 VBMI and on AVX2); their values from the blocks, rounded alike.
  const size_t stride = dot_act_row_bytes(t, K) + 64;
  std::vector<uint8_t> act(stride * kRows, 0xA5);
  std::vector<std::vector<double>> xs;
  for (int r = 0; r < kRows; ++r) {
    std::vector<float> x(static_cast<size_t>(K));
    for (auto& v : x) v = normal(rng) * (r == 3 ? 100.0f : 1.0f);
    if (r == 2) x.assign(x.size(), 0.0f);  // an all-zero row: scale 0
    quantize_dot_activations(t, act.data() + r * stride, x.data(), K);
    std::vector<uint8_t> row(act_row_bytes(t, K));
    quantize_activations(t, row.data(), x.data(), K);
    xs.push_back(act_values(t, row, K));
  }
  for (int rows = 1; rows <= kRows; ++rows) {
    std::vector<float> out(size_t(rows) * 3, -1.0f);
    dot_rows_for(t)(out.data(), 3, w.data(), act.data(), stride, rows, nb);
    for (int r = 0; r < rows; ++r) {
      double want = 0.0, magnitude = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        want += double(wf[size_t(k)]) * xs[size_t(r)][size_t(k)];
        magnitude += std::fabs(double(wf[size_t(k)]) * xs[size_t(r)][size_t(k)]);
      }
      EXPECT_NEAR(out[size_t(r) * 3], want, 2e-5 * magnitude + 1e-6) << "rows=" << rows << " r=" << r;
    }
  }
}

class QuantDot : public testing::TestWithParam<DType> {};

TEST_P(QuantDot, MatchesTheDequantizedSum) {
  std::printf("quantized dot products compiled for %s%s\n", quant_dot_isa(),
              q4_0_dot_reads_groups() ? ", Q4_0 in groups of four blocks" : "");
  uint32_t seed = 1 + 100 * uint32_t(GetParam());
  for (int64_t nb : {1, 2, 3, 4, 7, 10})
    for (bool edge : {false, true}) check_type(GetParam(), nb, edge, seed++);
}

// out (M, N) against the sums over k of weight(n, k) * act(m, k) in double, each within
// rel * sum |products| + abs.
template <class Weight, class Act>
void expect_double_sums(const std::vector<float>& out, int64_t M, int64_t N, int64_t K, Weight weight, Act act,
                        double rel, double abs) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double want = 0.0, magnitude = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = weight(n, k) * act(m, k);
        want += p;
        magnitude += std::fabs(p);
      }
      ASSERT_NEAR(out[size_t(m * N + n)], want, rel * magnitude + abs) << "m=" << m << " n=" << n;
    }
}

// The products of many rows (prefill, batched decode) of every type against sums in double over
// the dequantized weights and the activations as quantized: from a row below quant_gemm_min_rows
// (the dot products) to 7 past it, and M = 33 to 40 (every remainder of the tiles of 4 or 2 rows,
// and whole tiles) by N = 45 or 57 (a strip of 32 columns and a partial one of 13 or 25:
// AVX2's tiles of 16 columns then have a partial first half, or a whole one and a partial second),
// 3 super-blocks or 9 blocks of 32 along K. `edge`: every code at its top and every activation of
// a row at +127 or -127 (the sign alternating by row): the largest integer sums a run can hold.
void check_prefill(DType t, int64_t M, int64_t N, uint32_t seed, bool edge) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " M=" + std::to_string(M) + " N=" + std::to_string(N) + (edge ? " edge" : ""));
  std::mt19937 rng(seed);
  const int64_t nb = is_k_quant(t) ? 3 : 9, K = nb * dtype_block(t);
  const std::vector<uint8_t> w = random_blocks(t, N * nb, rng, edge);
  std::vector<float> wf(static_cast<size_t>(N * K));
  dequantize_row(t, wf.data(), w.data(), wf.size());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(M * K));
  for (size_t i = 0; i < x.size(); ++i) x[i] = edge ? (i / size_t(K) % 2 == 0 ? 1.0f : -1.0f) : normal(rng);
  std::vector<std::vector<double>> xs;
  for (int64_t m = 0; m < M; ++m) {
    std::vector<uint8_t> row(act_row_bytes(t, K));
    quantize_activations(t, row.data(), x.data() + m * K, K);
    xs.push_back(act_values(t, row, K));
  }
  ThreadPool pool(2);
  std::vector<float> out(static_cast<size_t>(M * N), -1.0f);
  matmul(pool, out.data(), N, x.data(), K, w.data(), t, M, N, K);
  expect_double_sums(
      out, M, N, K, [&](int64_t n, int64_t k) { return double(wf[size_t(n * K + k)]); },
      [&](int64_t m, int64_t k) { return xs[size_t(m)][size_t(k)]; }, 2e-5, 1e-6);
}

TEST_P(QuantDot, ManyRowsMatchTheDequantizedSums) {
  if (quant_gemm_supports(GetParam()))
    std::printf("%s weights: the integer GEMM from %lld rows\n", dtype_name(GetParam()),
                static_cast<long long>(quant_gemm_min_rows(GetParam())));
  else
    std::printf("%s weights: dequantized tiles and the f32 prefill kernel above 32 rows\n", dtype_name(GetParam()));
  uint32_t seed = 11 + 100 * uint32_t(GetParam());
  std::set<int64_t> rows;
  for (int64_t M = 33; M <= 40; ++M) rows.insert(M);
  const int64_t first = quant_gemm_min_rows(GetParam());
  for (int64_t M = std::max<int64_t>(1, first - 1); M <= first + 7; ++M) rows.insert(M);
  for (int64_t M : rows)
    for (int64_t N : {45, 57})
      for (bool edge : {false, true}) check_prefill(GetParam(), M, N, seed++, edge);
}

// kernels/cpu/quant/dequantize.h against dequantize_row, byte for byte: random codes under random finite
// f16 scales (any bits but an exponent of all ones: subnormals, zeros of either sign, 65504), odd
// row counts, and a destination one float off its alignment.
void check_dequantize(DType t, int64_t rows, uint32_t seed) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " rows=" + std::to_string(rows));
  std::mt19937 rng(seed);
  const int64_t n = rows * 3 * dtype_block(t);
  std::vector<uint8_t> w = random_blocks(t, n / dtype_block(t), rng, false);
  set_scales(t, w, [&](int64_t) {
    uint16_t h;
    do h = static_cast<uint16_t>(rng()); while ((h & 0x7C00) == 0x7C00);
    return h;
  });
  std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n) + 1);
  dequantize_row(t, want.data(), w.data(), size_t(n));
  dequantize_f32(t, got.data() + 1, w.data(), size_t(n));
  EXPECT_EQ(std::memcmp(want.data(), got.data() + 1, size_t(n) * sizeof(float)), 0);
}

TEST_P(QuantDot, DequantizeMatchesTheReferenceBitForBit) {
  uint32_t seed = 7 + 100 * uint32_t(GetParam());
  for (int64_t rows : {1, 3, 5, 63, 65}) check_dequantize(GetParam(), rows, seed++);
}

INSTANTIATE_TEST_SUITE_P(EveryType, QuantDot, testing::ValuesIn(kQuantTypes),
                         [](const testing::TestParamInfo<DType>& param) { return std::string(dtype_name(param.param)); });

// One activation row against bf16 weights (decode): whole steps of the even/odd loop, the vector
// rest and the scalar rest, against sums in double over the same bf16 values.
TEST(Bf16Decode, OneRowMatchesTheDoubleSum) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ThreadPool pool(2);
  constexpr int64_t N = 37;
  for (int64_t K : {24, 288, 301, 576, 800}) {
    SCOPED_TRACE("K=" + std::to_string(K));
    std::vector<uint16_t> w(static_cast<size_t>(N * K));
    for (auto& v : w) v = f32_to_bf16(normal(rng));
    std::vector<float> x(static_cast<size_t>(K));
    for (auto& v : x) v = normal(rng);
    std::vector<float> out(N, -1.0f);
    matmul(pool, out.data(), N, x.data(), K, w.data(), DType::bf16, 1, N, K);
    expect_double_sums(
        out, 1, N, K, [&](int64_t n, int64_t k) { return double(bf16_to_f32(w[size_t(n * K + k)])); },
        [&](int64_t, int64_t k) { return double(x[size_t(k)]); }, 1e-6, 0.0);
  }
}

// Prefill with 16-bit weights (more than 32 rows): with AVX2 or AVX-512, the panels of 16 or 32
// weight rows widened while packed, tiles of 6 or 8 rows with 1 to 7 left over, a partial panel (41
// columns) and a K with a tail past the vectors (99); Eigen's GEMM on the widened rows without them.
TEST(Dense16Prefill, PanelsMatchTheDoubleSum) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ThreadPool pool(2);
  constexpr int64_t N = 41, K = 99;
  for (DType t : {DType::f16, DType::bf16})
    for (int64_t M = 33; M <= 40; ++M) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " M=" + std::to_string(M));
      std::vector<uint16_t> w(static_cast<size_t>(N * K));
      for (auto& v : w) v = t == DType::f16 ? f32_to_f16(normal(rng)) : f32_to_bf16(normal(rng));
      std::vector<float> x(static_cast<size_t>(M * K));
      for (auto& v : x) v = normal(rng);
      std::vector<float> out(static_cast<size_t>(M * N), -1.0f);
      matmul(pool, out.data(), N, x.data(), K, w.data(), t, M, N, K);
      expect_double_sums(
          out, M, N, K,
          [&](int64_t n, int64_t k) {
            const uint16_t h = w[size_t(n * K + k)];
            return double(t == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h));
          },
          [&](int64_t m, int64_t k) { return double(x[size_t(m * K + k)]); }, 1e-6, 0.0);
    }
}

// batch_invariant (kernels/cpu/matmul.h): every row of a product of M rows equals, bit for bit,
// the same row multiplied alone (M = 1, decode's kernel), for every weight type and for M across
// each kernel boundary of the table atop matmul.cpp (2-7 small_m, 8-32 outer, above 32 the GEMMs),
// with rows of x and out strided. Without it, prefill's GEMMs round apart from decode's kernels.
TEST(BatchInvariant, EveryRowEqualsTheRowAlone) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ThreadPool pool(2);
  constexpr int64_t N = 45;
  std::vector<DType> types = {DType::f32, DType::f16, DType::bf16};
  types.insert(types.end(), std::begin(kQuantTypes), std::end(kQuantTypes));
  for (DType t : types) {
    const int64_t K = !is_quantized(t) ? 99 : is_k_quant(t) ? 2 * kQK : 9 * 32, ld_x = K + 3, ld_out = N + 5;
    std::vector<uint8_t> w;
    if (is_quantized(t)) {
      w = random_blocks(t, N * K / dtype_block(t), rng, false);
    } else {
      std::vector<float> wf(static_cast<size_t>(N * K));
      for (auto& v : wf) v = normal(rng);
      w.resize(wf.size() * dtype_bytes(t, 1));
      for (size_t i = 0; i < wf.size(); ++i) {
        const uint16_t h = t == DType::f16 ? f32_to_f16(wf[i]) : f32_to_bf16(wf[i]);
        if (t == DType::f32) std::memcpy(w.data() + 4 * i, &wf[i], 4);
        else std::memcpy(w.data() + 2 * i, &h, 2);
      }
    }
    for (int64_t M : {2, 5, 17, 33, 37, 100}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " M=" + std::to_string(M));
      std::vector<float> x(static_cast<size_t>(M * ld_x));
      for (auto& v : x) v = normal(rng);
      std::vector<float> out(static_cast<size_t>(M * ld_out), -1.0f), alone(N, -2.0f);
      matmul(pool, out.data(), ld_out, x.data(), ld_x, w.data(), t, M, N, K, /*batch_invariant=*/true);
      for (int64_t m = 0; m < M; ++m) {
        matmul(pool, alone.data(), N, x.data() + m * ld_x, K, w.data(), t, 1, N, K);
        ASSERT_EQ(std::memcmp(alone.data(), out.data() + m * ld_out, sizeof(float) * size_t(N)), 0) << "row " << m;
      }
    }
  }
}

TEST(QuantDotActivations, QuantizeAsLlamaCpp) {
  // Q8_K: the value of largest magnitude becomes -127 (its sign flipped into d), sums per 16.
  std::vector<float> x(kQK);
  for (int i = 0; i < kQK; ++i) x[size_t(i)] = float(i % 17) - 8.0f;
  x[5] = -12.7f;
  ActQ8_K k{};
  quantize_act_q8_k(&k, x.data(), kQK);
  EXPECT_EQ(k.q[5], -127);
  EXPECT_FLOAT_EQ(k.d, 0.1f);
  int sum0 = 0;
  for (int j = 0; j < 16; ++j) sum0 += k.q[j];
  EXPECT_EQ(k.bsums[0], sum0);
  // Q8_1: s = d * sum(q).
  ActQ8_1 a{};
  quantize_act_q8_1(&a, x.data(), 32);
  int sum = 0;
  for (int j = 0; j < 32; ++j) sum += a.q[j];
  EXPECT_FLOAT_EQ(a.s, a.d * float(sum));
  EXPECT_FLOAT_EQ(a.d, 12.7f / 127.0f);
  EXPECT_EQ(a.q[5], -127);
}

}  // namespace
}  // namespace minfer::cpu
