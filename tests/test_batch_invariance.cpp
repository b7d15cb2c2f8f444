// Batch invariance by default on the CPU: with quantized weights packed at load
// (kernels/cpu/quant/packed.h), the logits of a row do not depend on the rows that share its pass.
// A small grouped-query model (4 heads over 2 KV heads, every cut the unfused path makes a multiple
// of 16 rows, a classifier of 100 rows: 6 groups and 4 rows in the file's layout, shared with the
// embedding table, so the tokens are looked up from packed rows) reads a prompt of 40 tokens
// (past every type's quant_gemm_min_rows, where the file layout's products switch from dot
// products to the integer GEMM) in five shapes of passes:
//   - one pass of 40 rows;
//   - a token at a time (decode);
//   - chunks of 3 rows;
//   - a token a step, each step with 3 rows of another sequence's prompt (a server's mixed step);
//   - one pass of 24 rows of the other sequence, then the 40.
// Every position's logits must be the one pass's, bit for bit, with fused and unfused kernels,
// without --batch-invariant. The same holds on the quantized files of tests/data/models. A type
// this build does not pack is reported skipped.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/kv_cache.h"
#include "formats/model_files.h"
#include "kernels/cpu/quant/packed.h"
#include "model/llama.h"

namespace minfer {
namespace {

constexpr int64_t kCtx = 128;
constexpr int32_t kSeqA = 0, kSeqB = 1;

struct Row {
  int32_t seq, pos, token;
};
using Pass = std::vector<Row>;
using Logits = std::map<std::pair<int32_t, int32_t>, std::vector<float>>;  // by (seq, pos)

// Every row's logits from running `passes` in order over a fresh cache of two sequences.
Logits run(Backend& backend, LlamaModel& model, const std::vector<Pass>& passes) {
  const ModelInfo& info = model.info();
  KvCache cache(backend, info.n_layers, 2, kCtx, info.n_kv_heads, info.head_dim, DType::f32);
  size_t most = 0;
  for (const Pass& p : passes) most = std::max(most, p.size());
  model.reserve(int64_t(most), int64_t(most));
  Logits out;
  for (const Pass& p : passes) {
    const int64_t M = int64_t(p.size()), V = info.vocab_size;
    Tensor ids = backend.empty({4, M}, DType::i32);
    int32_t* v = ids.data_as<int32_t>();
    for (int64_t m = 0; m < M; ++m) {
      v[m] = p[size_t(m)].token;
      v[M + m] = p[size_t(m)].seq;
      v[2 * M + m] = p[size_t(m)].pos;
      v[3 * M + m] = int32_t(m);
    }
    Tensor logits = backend.empty({M, V}, DType::f32);
    model.forward({ids.select(0, 0), ids.select(0, 1), ids.select(0, 2), ids.select(0, 3)}, cache, logits);
    backend.synchronize();
    for (int64_t m = 0; m < M; ++m) {
      const float* row = logits.data_as<float>() + m * V;
      out[{p[size_t(m)].seq, p[size_t(m)].pos}] = std::vector<float>(row, row + V);
    }
  }
  return out;
}

// Rows [begin, end) of sequence seq's prompt.
Pass rows(const std::vector<int32_t>& prompt, int32_t seq, size_t begin, size_t end) {
  Pass p;
  for (size_t i = begin; i < end; ++i) p.push_back({seq, int32_t(i), prompt[i]});
  return p;
}

std::vector<int32_t> prompt(size_t n, uint32_t seed, int64_t vocab) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < n; ++i) ids.push_back(int32_t((seed + i * 2654435761u) % uint32_t(vocab)));
  return ids;
}

// The five shapes of passes above, by name.
std::vector<std::pair<std::string, std::vector<Pass>>> shapes(int64_t vocab) {
  const std::vector<int32_t> a = prompt(40, 7, vocab), b = prompt(120, 11, vocab);
  std::vector<std::pair<std::string, std::vector<Pass>>> out;
  out.push_back({"one pass", {rows(a, kSeqA, 0, a.size())}});
  std::vector<Pass> one_by_one, chunks, mixed;
  for (size_t i = 0; i < a.size(); ++i) one_by_one.push_back(rows(a, kSeqA, i, i + 1));
  for (size_t i = 0; i < a.size(); i += 3) chunks.push_back(rows(a, kSeqA, i, std::min(a.size(), i + 3)));
  for (size_t i = 0; i < a.size(); ++i) {
    Pass step = rows(b, kSeqB, 3 * i, 3 * i + 3);
    const Row mine = rows(a, kSeqA, i, i + 1)[0];
    step.insert(i % 2 ? step.end() : step.begin(), mine);  // first or last row of the step
    mixed.push_back(step);
  }
  Pass both = rows(b, kSeqB, 0, 24);
  for (const Row& r : rows(a, kSeqA, 0, a.size())) both.push_back(r);
  out.push_back({"a token at a time", one_by_one});
  out.push_back({"chunks of 3", chunks});
  out.push_back({"a token a step beside 3 rows of another sequence", mixed});
  out.push_back({"after 24 rows of another sequence in one pass", {both}});
  return out;
}

// Sequence A's logits at every position equal, bit for bit, under every shape of passes; returns
// the number of shapes whose logits differ from the one pass's somewhere (0 when invariant).
int shapes_that_differ(Backend& backend, LlamaModel& model, bool expect_equal) {
  const int64_t V = model.info().vocab_size;
  const auto all = shapes(V);
  const Logits reference = run(backend, model, all[0].second);
  int differ = 0;
  for (size_t s = 1; s < all.size(); ++s) {
    const Logits got = run(backend, model, all[s].second);
    int first_bad = -1;
    for (int32_t pos = 0; pos < 40 && first_bad < 0; ++pos)
      if (std::memcmp(got.at({kSeqA, pos}).data(), reference.at({kSeqA, pos}).data(), size_t(V) * sizeof(float)) != 0)
        first_bad = pos;
    differ += first_bad >= 0;
    if (expect_equal) {
      EXPECT_EQ(first_bad, -1) << all[s].first << ": the logits at position " << first_bad
                               << " are not the one pass's";
    }
  }
  return differ;
}

LlamaConfig invariance_config() {
  LlamaConfig c;
  c.dim = 256;  // a K-quant's row is 256 weights
  c.hidden_dim = 256;
  c.n_layers = 2;
  c.n_heads = 4;  // q 256 rows, k and v 128 each
  c.n_kv_heads = 2;
  c.vocab_size = 100;
  c.n_ctx = kCtx;
  c.shared_classifier = true;
  return c;
}

class BatchInvariance : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchInvariance, EveryPositionsLogitsWhateverThePasses) {
  const WeightTypes types = *WeightTypes::parse(GetParam());
  for (DType t : {types.base, types.is_k_mix() ? DType::q6_k : types.base})
    if (!cpu::packs(t)) GTEST_SKIP() << "skipped: this build does not pack " << dtype_name(t);
  auto backend = make_backend(BackendKind::cpu);
  for (Kernels kernels : {Kernels::fused, Kernels::unfused}) {
    SCOPED_TRACE(std::string(GetParam()) + ", " + kernels_name(kernels));
    LlamaOptions options;
    options.dtype = types;
    options.kernels = kernels;
    LlamaModel model(*backend, invariance_config(), "invariance", options);
    // The classifier and each layer's wqkv, wo, w13 and w2; q4_k_m's second layer holds V in Q6_K,
    // so its wqkv is two parts, each packed.
    EXPECT_EQ(model.weight_layout(), types.is_k_mix() ? "10 of 10 matrices packed16" : "9 of 9 matrices packed16");
    shapes_that_differ(*backend, model, true);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, BatchInvariance,
                         ::testing::Values("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k",
                                           "q6_k", "q4_k_m"),
                         [](const ::testing::TestParamInfo<std::string>& param) { return param.param; });

// The same on files llama.cpp's llama-quantize wrote (tests/data/models/kq-*.gguf: 4 heads over 2
// KV heads, an untied classifier in Q6_K, the _M mixes' V and w2 in Q6_K in some layers), loaded
// as they are, without --batch-invariant: real blocks, scales and mixes rather than synthetic ones.
// A file with a matrix this build does not pack is reported skipped.
class BatchInvarianceFiles : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchInvarianceFiles, EveryPositionsLogitsWhateverThePasses) {
  const std::string path = std::string(MINFER_SOURCE_DIR) + "/tests/data/models/kq-" + GetParam() + ".gguf";
  auto backend = make_backend(BackendKind::cpu);
  auto model = load_model(path, *backend, LlamaOptions{});
  const std::string layout = model->weight_layout();  // "P of M matrices packed16"
  int packed = 0, matrices = -1;
  std::sscanf(layout.c_str(), "%d of %d", &packed, &matrices);
  if (packed != matrices)
    GTEST_SKIP() << "skipped: this build packs " << (layout.empty() ? "none" : layout) << " of kq-" << GetParam();
  shapes_that_differ(*backend, *model, true);
}

INSTANTIATE_TEST_SUITE_P(Files, BatchInvarianceFiles,
                         ::testing::Values("q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k_m", "q4_k_m", "q5_k_m", "q6_k"),
                         [](const ::testing::TestParamInfo<std::string>& param) { return param.param; });

// A part that the unfused path cuts off a group boundary stays in the file's layout: heads of 40
// over one KV head put the k | v cut of wqkv at row 200, 8 rows into a group, so both layers' wqkv
// are unpacked and take the file layout's kernels, which round apart by the number of rows (dot
// products for a few rows, the integer GEMM for many; whether they differ in these logits depends
// on the CPU, and is printed). What holds: with --batch-invariant every shape gives the one pass's
// logits bit for bit (the file parts computed row by row beside the packed ones), and without it a
// token at a time gives the same logits as with it (a lone row takes the same kernels either way).
TEST(BatchInvarianceFileLayout, APartCutOffAGroupNeedsTheOption) {
  if (!cpu::packs(DType::q8_0)) GTEST_SKIP() << "skipped: this build does not pack q8_0";
  LlamaConfig c = invariance_config();
  c.dim = 64;
  c.hidden_dim = 96;
  c.n_heads = 4;
  c.n_kv_heads = 1;
  c.head_size = 40;  // q 160 rows, k and v 40 each
  for (Kernels kernels : {Kernels::fused, Kernels::unfused}) {
    SCOPED_TRACE(kernels_name(kernels));
    LlamaOptions options;
    options.dtype = WeightTypes(DType::q8_0);
    options.kernels = kernels;
    std::vector<Logits> one_by_one;
    for (bool invariant : {true, false}) {
      BackendOptions bo;
      bo.batch_invariant = invariant;
      auto backend = make_backend(BackendKind::cpu, bo);
      LlamaModel model(*backend, c, "file-layout part", options);
      EXPECT_EQ(model.weight_layout(), "7 of 9 matrices packed16");  // both layers' wqkv in the file's layout
      const int differ = shapes_that_differ(*backend, model, invariant);
      if (!invariant) {
        std::cout << "note: " << kernels_name(kernels) << ", without --batch-invariant " << differ
                  << " of 4 shapes of passes round apart on this CPU\n";
      }
      one_by_one.push_back(run(*backend, model, shapes(c.vocab_size)[1].second));
    }
    EXPECT_TRUE(one_by_one[0] == one_by_one[1]) << "a token at a time rounds apart with and without --batch-invariant";
  }
}

// A packed matrix is the CPU backend's own: the reference backend, which reads the file's layout,
// refuses it in one line instead of multiplying permuted bytes.
TEST(BatchInvarianceFileLayout, OnlyTheCpuBackendTakesPackedWeights) {
  if (!cpu::packs(DType::q8_0)) GTEST_SKIP() << "skipped: this build packs no q8_0 (no AVX2)";
  auto cpu = make_backend(BackendKind::cpu, BackendOptions{});
  auto ref = make_backend(BackendKind::ref, BackendOptions{});
  Tensor w = cpu->empty({32, 64}, DType::q8_0);
  cpu->fill_uniform(w, 7, -1.0f, 1.0f);
  const Tensor packed = cpu->pack_weights(w);
  ASSERT_EQ(packed.row_layout(), RowLayout::packed16);
  Tensor x = cpu->empty({3, 64}, DType::f32), out = cpu->empty({3, 32}, DType::f32);
  cpu->fill_uniform(x, 8, -1.0f, 1.0f);
  EXPECT_NO_THROW(cpu->matmul(out, x, packed));
  try {
    ref->matmul(out, x, packed);
    FAIL() << "the reference backend multiplied packed weights";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("packed for the CPU backend"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace minfer
