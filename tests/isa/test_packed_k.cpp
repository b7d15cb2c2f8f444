// The K-quants' packed kernels (kernels/cpu/quant/packed_k.cpp) called directly, type by type:
// a group packs and unpacks back to the file's bytes, and every tile (1 to 12 activation rows,
// both sides of the AVX-512 tile's switch from registers to a strip, 1 to max_groups groups) gives, element for element, the bits of a plain-loop oracle of
// quant_gemm's run-order arithmetic (packed.h) and of quant_gemm itself on the file's rows. Built
// into the ISA binaries (tests/CMakeLists.txt); a build without the kernels (scalar) skips, saying so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/quants.h"
#include "core/threads.h"
#include "kernels/cpu/quant/packed.h"
#include "kernels/cpu/quant/packed_tile.h"
#include "kernels/cpu/quant/quant_dot.h"
#include "kernels/cpu/quant/quant_gemm.h"

namespace minfer::cpu {
namespace {

// Random bytes with finite f16 scales (d, dmin) of either sign; `edge`: every code byte 0xFF.
std::vector<uint8_t> random_blocks(DType t, int64_t n_blocks, std::mt19937& rng, bool edge) {
  std::vector<uint8_t> bytes(size_t(n_blocks * dtype_block_bytes(t)));
  for (auto& b : bytes) b = static_cast<uint8_t>(edge ? 0xFF : rng());
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (int64_t b = 0; b < n_blocks; ++b)
    for (int i = 0; i < scale_offsets(t).count; ++i) {
      const uint16_t h = f32_to_f16(scale(rng));
      std::memcpy(bytes.data() + b * dtype_block_bytes(t) + scale_offsets(t).at[i], &h, 2);
    }
  return bytes;
}

// The codes of a run as unsigned bytes u, its dl and ml, from a file block: plain loops over
// core/quants.h's description of each block.
struct Run {
  int u[32];
  float dl, ml;
};
Run file_run(DType t, const uint8_t* block, int j, int G) {
  Run run{};
  for (int e = 0; e < G; ++e) {
    const int k = j * G + e;
    int& u = run.u[e];
    switch (t) {
      case DType::q2_k: {
        const auto& b = *reinterpret_cast<const BlockQ2_K*>(block);
        u = (b.qs[32 * (k / 128) + k % 32] >> (2 * (k % 128 / 32))) & 3;
        run.dl = f16_to_f32(b.d) * float(b.scales[j] & 0xF);
        run.ml = f16_to_f32(b.dmin) * float(b.scales[j] >> 4);
        break;
      }
      case DType::q3_k: {
        const auto& b = *reinterpret_cast<const BlockQ3_K*>(block);
        u = ((b.qs[32 * (k / 128) + k % 32] >> (2 * (k % 128 / 32))) & 3) | (((b.hmask[k % 32] >> (k / 32)) & 1) << 2);
        run.dl = f16_to_f32(b.d) * float(q3_k_scale(b.scales, j));
        break;
      }
      case DType::q4_k: case DType::q5_k: {
        const bool five = t == DType::q5_k;
        const auto* b4 = reinterpret_cast<const BlockQ4_K*>(block);
        const auto* b5 = reinterpret_cast<const BlockQ5_K*>(block);
        const uint8_t* qs = five ? b5->qs : b4->qs;
        u = (qs[32 * (k / 64) + k % 32] >> (4 * (k / 32 % 2))) & 0xF;
        if (five) u |= ((b5->qh[k % 32] >> (k / 32)) & 1) << 4;
        uint8_t sc, m;
        k_scale_min(five ? b5->scales : b4->scales, j, &sc, &m);
        run.dl = f16_to_f32(five ? b5->d : b4->d) * float(sc);
        run.ml = f16_to_f32(five ? b5->dmin : b4->dmin) * float(m);
        break;
      }
      default: {  // q6_k
        const auto& b = *reinterpret_cast<const BlockQ6_K*>(block);
        const int h = k / 128, e2 = k % 128;
        u = ((b.ql[64 * h + e2 % 64] >> (4 * (e2 / 64))) & 0xF) | (((b.qh[32 * h + e2 % 32] >> (2 * (e2 / 32))) & 3) << 4);
        run.dl = f16_to_f32(b.d) * float(b.scales[j]);
        break;
      }
    }
  }
  return run;
}

int run_length(DType t) { return t == DType::q4_k || t == DType::q5_k ? 32 : 16; }
int code_shift(DType t) { return t == DType::q3_k ? 4 : t == DType::q6_k ? 32 : 0; }
bool has_min(DType t) { return t == DType::q2_k || t == DType::q4_k || t == DType::q5_k; }

// The activations of M rows of x as the tiles read them (quant_gemm.cpp's split_activations).
struct Split {
  std::vector<int8_t> q;
  std::vector<float> dx, cx;
  std::vector<int32_t> shifted;
  packed::Activations view;
};
Split split(DType t, const std::vector<uint8_t>& act, int64_t M, int64_t K) {
  const int G = run_length(t);
  const int64_t runs = K / G;
  Split s{std::vector<int8_t>(size_t(M * K)), std::vector<float>(size_t(M * runs)),
          std::vector<float>(size_t(M * runs)), std::vector<int32_t>(size_t(M * runs)), {}};
  for (int64_t m = 0; m < M; ++m) {
    const auto* blocks = reinterpret_cast<const ActQ8_K*>(act.data() + size_t(m) * act_row_bytes(t, K));
    for (int64_t g = 0; g < runs; ++g) {
      const ActQ8_K& b = blocks[g * G / kQK];
      int32_t sum = 0;
      for (int e = 0; e < G; ++e) {
        const int8_t q = b.q[g * G % kQK + e];
        s.q[size_t(m * K + g * G + e)] = q;
        sum += q;
      }
      s.dx[size_t(m * runs + g)] = b.d;
      s.shifted[size_t(m * runs + g)] = code_shift(t) * sum;
      s.cx[size_t(m * runs + g)] = b.d * float(sum);
    }
  }
  s.view = {s.q.data(), s.dx.data(), s.shifted.data(), s.cx.data(), runs};
  return s;
}

// packed.h's arithmetic, one element at a time over the file's rows.
std::vector<float> oracle(DType t, const std::vector<uint8_t>& w, const Split& a, int64_t M, int64_t N, int64_t K) {
  const int G = run_length(t);
  const int64_t nb = K / kQK, row_bytes = nb * dtype_block_bytes(t);
  std::vector<float> out(size_t(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t g = 0; g < K / G; ++g) {
        const uint8_t* block = w.data() + n * row_bytes + g * G / kQK * dtype_block_bytes(t);
        const Run run = file_run(t, block, int(g % (kQK / G)), G);
        int32_t S = -a.shifted[size_t(m * (K / G) + g)];
        for (int e = 0; e < G; ++e) S += run.u[e] * a.q[size_t(m * K + g * G + e)];
        const float scale = run.dl * a.dx[size_t(m * (K / G) + g)];
        acc = std::fma(float(S), scale, acc);
        if (has_min(t)) acc = std::fma(-run.ml, a.cx[size_t(m * (K / G) + g)], acc);
      }
      out[size_t(m * N + n)] = acc;
    }
  return out;
}

class PackedK : public testing::TestWithParam<DType> {};

std::string name(const testing::TestParamInfo<DType>& info) { return dtype_name(info.param); }

TEST_P(PackedK, RoundTripsAndMatchesQuantGemmBitForBit) {
  const DType t = GetParam();
  const packed::TypeKernels* kernels = packed::k_kernels(t);
  if (kernels == nullptr) GTEST_SKIP() << "skipped: this build packs no " << dtype_name(t) << " (scalar)";
  constexpr int64_t M = 12, N = 32, K = 3 * kQK;  // 2 groups, 3 super-blocks
  const int64_t nb = K / kQK, row_bytes = nb * dtype_block_bytes(t), group_bytes = kPackRows * row_bytes;
  for (bool edge : {false, true}) {
    SCOPED_TRACE(std::string(dtype_name(t)) + (edge ? " edge" : ""));
    std::mt19937 rng(7 + uint32_t(t));
    const std::vector<uint8_t> w = random_blocks(t, N * nb, rng, edge);
    std::vector<uint8_t> p(w.size());
    for (int64_t g = 0; g < N / kPackRows; ++g)
      kernels->pack_group(p.data() + g * group_bytes, w.data() + g * group_bytes, row_bytes, nb);
    ASSERT_NE(0, std::memcmp(p.data(), w.data(), w.size())) << "packing left the bytes as they were";
    std::vector<uint8_t> row(static_cast<size_t>(row_bytes));
    for (int64_t n = 0; n < N; ++n) {
      kernels->unpack_row(row.data(), p.data() + n / kPackRows * group_bytes, int(n % kPackRows), nb);
      ASSERT_EQ(0, std::memcmp(row.data(), w.data() + n * row_bytes, size_t(row_bytes))) << "row " << n;
    }

    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<uint8_t> act(size_t(M) * act_row_bytes(t, K));
    for (int64_t m = 0; m < M; ++m) {
      std::vector<float> x(static_cast<size_t>(K));
      for (auto& v : x) v = edge ? (m % 2 == 0 ? 1.0f : -1.0f) : normal(rng) * (m == 3 ? 100.0f : 1.0f);
      quantize_activations(t, act.data() + size_t(m) * act_row_bytes(t, K), x.data(), K);
    }
    const Split a = split(t, act, M, K);
    const std::vector<float> want = oracle(t, w, a, M, N, K);
    ThreadPool pool(2);
    std::vector<float> gemm(size_t(M * N));
    quant_gemm(pool, gemm.data(), N, act.data(), w.data(), t, M, N, K);
    ASSERT_EQ(0, std::memcmp(gemm.data(), want.data(), want.size() * sizeof(float))) << "the oracle is not quant_gemm";

    for (int rows = 1; rows <= std::min<int64_t>(kernels->max_rows, M); ++rows)
      for (int groups = 1; groups <= kernels->max_groups; ++groups) {
        std::vector<float> out(size_t(M * N), -1.0f);
        for (int64_t m = 0; m < M; m += rows)
          for (int64_t g = 0; g < N / kPackRows; g += groups) {
            const packed::Tile tile{p.data() + g * group_bytes, group_bytes, groups, &a.view, m,
                                    int(std::min<int64_t>(rows, M - m)), K, out.data() + m * N + g * kPackRows, N};
            kernels->tile(tile);
          }
        for (int64_t i = 0; i < M * N; ++i)
          ASSERT_EQ(0, std::memcmp(&out[size_t(i)], &want[size_t(i)], sizeof(float)))
              << "rows=" << rows << " groups=" << groups << " m=" << i / N << " n=" << i % N << ": " << out[size_t(i)]
              << " != " << want[size_t(i)];
      }
  }
}

INSTANTIATE_TEST_SUITE_P(KQuants, PackedK,
                         testing::Values(DType::q2_k, DType::q3_k, DType::q4_k, DType::q5_k, DType::q6_k), name);

}  // namespace
}  // namespace minfer::cpu
