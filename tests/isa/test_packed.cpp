// The packed layout of quantized weights (kernels/cpu/quant/packed.h), in every ISA binary
// (tests/CMakeLists.txt): packing gives back the file's bytes; every row of a product equals, bit
// for bit, the same row multiplied alone; every element equals the run-order sum in plain C++
// (matmul_run_order) and quant_gemm's on the file layout; and the products stay near the plain
// reference. A type this build does not pack is skipped, with the reason. In builds without
// packing (scalar) the file layout's products must be invariant by default: tested here too, with
// the dot products that give it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/quants.h"
#include "core/threads.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant/packed.h"
#include "kernels/cpu/quant/quant_dot.h"
#include "kernels/cpu/quant/quant_gemm.h"
#include "kernels/ref/matmul.h"
#include "tests/isa/random_blocks.h"

namespace minfer::cpu {
namespace {

class Packed : public testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!packs(GetParam()))
      GTEST_SKIP() << dtype_name(GetParam()) << " has no packed kernel in this build (" << quant_dot_isa()
                   << " dot products)";
  }
};

// K of one block (one super-block) and of several.
std::vector<int64_t> widths(DType t) {
  return is_k_quant(t) ? std::vector<int64_t>{kQK, 3 * kQK} : std::vector<int64_t>{32, 9 * 32};
}

std::vector<uint8_t> matrix(DType t, int64_t N, int64_t K, std::mt19937& rng, bool edge) {
  return random_blocks(t, N * K / dtype_block(t), rng, edge);
}

// Rows of x, ld_x apart; `edge`: every value of a row +1 or -1 (codes of +-127 at every k).
std::vector<float> activations(int64_t M, int64_t K, int64_t ld_x, std::mt19937& rng, bool edge) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(size_t(M * ld_x), std::nanf(""));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) x[size_t(m * ld_x + k)] = edge ? (m % 2 == 0 ? 1.0f : -1.0f) : normal(rng);
  return x;
}

TEST_P(Packed, UnpackGivesBackTheFileBytes) {
  const DType t = GetParam();
  std::mt19937 rng(3 + uint32_t(t));
  for (int64_t K : widths(t))
    for (int64_t N : {16, 17, 31, 32, 33, 53}) {
      SCOPED_TRACE("N=" + std::to_string(N) + " K=" + std::to_string(K));
      const std::vector<uint8_t> w = matrix(t, N, K, rng, false);
      std::vector<uint8_t> p(w.size(), 0xA5);
      pack_rows(t, p.data(), w.data(), N, K);
      const size_t row_bytes = w.size() / size_t(N);
      // Whole groups are rearranged; the rest is the file's.
      EXPECT_NE(std::memcmp(p.data(), w.data(), row_bytes * 16), 0);
      std::vector<uint8_t> row(row_bytes + 1, 0x5A);
      for (int64_t n = 0; n < N; ++n) {
        unpack_row(t, row.data(), p.data(), n, N, K);
        ASSERT_EQ(std::memcmp(row.data(), w.data() + size_t(n) * row_bytes, row_bytes), 0) << "row " << n;
        ASSERT_EQ(row[row_bytes], 0x5A) << "row " << n << ": wrote past the row";
      }
    }
}

// Every row of a product of M rows against the row alone, bit for bit; the product against
// matmul_run_order and quant_gemm, bit for bit.
TEST_P(Packed, EveryRowEqualsTheRowAloneAndTheRunOrderSum) {
  const DType t = GetParam();
  std::mt19937 rng(5 + uint32_t(t));
  ThreadPool pool(2);
  constexpr int64_t N = 53;  // 3 groups and 5 rows in the file's layout
  for (int64_t K : widths(t))
    for (bool edge : {false, true}) {
      const std::vector<uint8_t> w = matrix(t, N, K, rng, edge);
      std::vector<uint8_t> p(w.size());
      pack_rows(t, p.data(), w.data(), N, K);
      for (int64_t M : {1, 2, 3, 4, 5, 7, 8, 9, 16, 33}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " M=" + std::to_string(M) + " K=" + std::to_string(K) +
                     (edge ? " edge" : ""));
        const int64_t ld_x = K + 3, ld_out = N + 5;
        const std::vector<float> x = activations(M, K, ld_x, rng, edge);
        std::vector<float> out(size_t(M * ld_out), -1.0f), alone(N, -2.0f), oracle(size_t(M * N), -3.0f);
        matmul_packed(pool, out.data(), ld_out, x.data(), ld_x, p.data(), t, M, N, K);
        for (int64_t m = 0; m < M; ++m) {
          matmul_packed(pool, alone.data(), N, x.data() + m * ld_x, K, p.data(), t, 1, N, K);
          ASSERT_EQ(std::memcmp(alone.data(), out.data() + m * ld_out, sizeof(float) * N), 0) << "row " << m;
        }
        matmul_run_order(pool, oracle.data(), N, x.data(), ld_x, w.data(), t, M, N, K);
        for (int64_t m = 0; m < M; ++m)
          ASSERT_EQ(std::memcmp(oracle.data() + m * N, out.data() + m * ld_out, sizeof(float) * N), 0)
              << "row " << m << " against matmul_run_order";
        if (quant_gemm_supports(t)) {
          std::vector<uint8_t> act(act_row_bytes(t, K) * size_t(M));
          for (int64_t m = 0; m < M; ++m) quantize_activations(t, act.data() + act_row_bytes(t, K) * m, x.data() + m * ld_x, K);
          std::vector<float> gemm(size_t(M * N), -4.0f);
          quant_gemm(pool, gemm.data(), N, act.data(), w.data(), t, M, N, K);
          ASSERT_EQ(std::memcmp(gemm.data(), oracle.data(), sizeof(float) * size_t(M * N)), 0) << "against quant_gemm";
        }
      }
    }
}

// Against the plain reference (double sums over the dequantized weights and the f32 activations):
// the activations' rounding to int8 is the only difference, an NMSE of about 2e-5.
TEST_P(Packed, StaysNearThePlainReference) {
  const DType t = GetParam();
  std::mt19937 rng(7 + uint32_t(t));
  ThreadPool pool(2);
  constexpr int64_t M = 9, N = 53;
  for (int64_t K : widths(t)) {
    SCOPED_TRACE("K=" + std::to_string(K));
    const std::vector<uint8_t> w = matrix(t, N, K, rng, false);
    std::vector<uint8_t> p(w.size());
    pack_rows(t, p.data(), w.data(), N, K);
    const std::vector<float> x = activations(M, K, K, rng, false);
    std::vector<float> out(size_t(M * N)), want(size_t(M * N));
    matmul_packed(pool, out.data(), N, x.data(), K, p.data(), t, M, N, K);
    ref::matmul(want.data(), N, x.data(), K, w.data(), t, M, N, K);
    double error = 0.0, power = 0.0;
    for (size_t i = 0; i < out.size(); ++i) {
      error += (double(out[i]) - want[i]) * (double(out[i]) - want[i]);
      power += double(want[i]) * want[i];
    }
    EXPECT_LT(error / power, 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryType, Packed, testing::ValuesIn(kQuantTypes),
                         [](const testing::TestParamInfo<DType>& param) { return std::string(dtype_name(param.param)); });

// Decode's dot products give a row the same result whatever the rows of one call (1 to 4) and the
// row's place among them: what makes the file layout's products invariant where they serve every M.
TEST(QuantDotRows, ARowsResultDoesNotDependOnTheRowsOfTheCall) {
  std::mt19937 rng(9);
  for (DType t : kQuantTypes) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t K = is_k_quant(t) ? 3 * kQK : 9 * 32, nb = K / dtype_block(t);
    const std::vector<uint8_t> w = matrix(t, 1, K, rng, false);
    const size_t stride = dot_act_row_bytes(t, K);
    std::vector<uint8_t> act(stride * 4);
    const std::vector<float> x = activations(4, K, K, rng, false);
    for (int r = 0; r < 4; ++r) quantize_dot_activations(t, act.data() + stride * r, x.data() + r * K, K);
    float alone[4];
    for (int r = 0; r < 4; ++r) dot_rows_for(t)(&alone[r], 1, w.data(), act.data() + stride * r, stride, 1, nb);
    for (int rows = 2; rows <= 4; ++rows)
      for (int first = 0; first + rows <= 4; ++first) {
        float out[4];
        dot_rows_for(t)(out, 1, w.data(), act.data() + stride * first, stride, rows, nb);
        for (int r = 0; r < rows; ++r)
          ASSERT_EQ(std::memcmp(&out[r], &alone[first + r], sizeof(float)), 0) << "rows=" << rows << " row " << first + r;
      }
  }
}

// The CPU backend's product for quantized weights in the file's layout (cpu::matmul, default
// options) is invariant where this build neither packs the type nor has the integer GEMM: it then
// takes the dot products for every M (matmul_quant.cpp). Elsewhere the backend packs the weights.
TEST(FileLayout, InvariantByDefaultWithoutPackingOrTheIntegerGemm) {
  std::mt19937 rng(11);
  ThreadPool pool(2);
  constexpr int64_t N = 45;
  int tested = 0;
  for (DType t : kQuantTypes) {
    if (packs(t) || quant_gemm_supports(t)) continue;
    ++tested;
    const int64_t K = is_k_quant(t) ? 2 * kQK : 9 * 32, ld_x = K + 3, ld_out = N + 5;
    const std::vector<uint8_t> w = matrix(t, N, K, rng, false);
    for (int64_t M : {2, 5, 33, 40}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " M=" + std::to_string(M));
      const std::vector<float> x = activations(M, K, ld_x, rng, false);
      std::vector<float> out(size_t(M * ld_out), -1.0f), alone(N, -2.0f);
      matmul(pool, out.data(), ld_out, x.data(), ld_x, w.data(), t, M, N, K);
      for (int64_t m = 0; m < M; ++m) {
        matmul(pool, alone.data(), N, x.data() + m * ld_x, K, w.data(), t, 1, N, K);
        ASSERT_EQ(std::memcmp(alone.data(), out.data() + m * ld_out, sizeof(float) * N), 0) << "row " << m;
      }
    }
  }
  if (tested == 0) GTEST_SKIP() << "every quantized type is packed or has the integer GEMM in this build";
}

}  // namespace
}  // namespace minfer::cpu
