// Perplexity and KL divergence (engine/perplexity.h, `minfer perplexity`): a model that predicts
// every token uniformly has perplexity = vocabulary size; a model against itself has KL 0 and
// full top-1 agreement; the windows, BOS replacement and scored positions agree with a direct
// computation from the independent run.c-style forward (model/naive_llama.h); bad inputs are
// refused with one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/perplexity.h"
#include "model/llama.h"
#include "tests/random_llama.h"
#include "tests/test_support.h"

namespace minfer::test {
namespace {

LlamaConfig small_config() { return small_gqa_config(67, 64); }

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& v : t) v = static_cast<int32_t>(rng() % uint32_t(vocab));
  return t;
}

std::unique_ptr<Backend> cpu_backend() {
  BackendOptions o;
  o.threads = 2;
  return make_backend(BackendKind::cpu, o);
}

TEST(Perplexity, UniformModelHasPerplexityEqualToTheVocabulary) {
  auto backend = cpu_backend();
  LlamaHostWeights w = random_llama_weights(small_config(), 7, 2.0);
  std::memset(w.classifier.data(), 0, w.classifier.nbytes());  // every logit 0: p = 1 / vocab
  LlamaModel model(*backend, w, "uniform", LlamaOptions{});
  PerplexityOptions o;
  o.n_ctx = 16;
  PerplexityResult r = perplexity(model, nullptr, random_tokens(50, 67, 1), o);
  EXPECT_EQ(r.n_windows, 3);               // 50 tokens: three whole windows of 16
  EXPECT_EQ(r.n_tokens, 3 * (16 - 1 - 8));  // the second half of each window
  EXPECT_NEAR(r.ppl, 67.0, 1e-9);
  EXPECT_NEAR(r.ppl_error, 0.0, 1e-9);  // every prediction costs log 67 exactly
}

TEST(Perplexity, KlOfAModelAgainstItselfIsZero) {
  auto backend = cpu_backend();
  LlamaHostWeights w = random_llama_weights(small_config(), 8, 2.5);
  LlamaModel model(*backend, w, "a", LlamaOptions{});
  LlamaModel same(*backend, w, "b", LlamaOptions{});
  PerplexityOptions o;
  o.n_ctx = 20;
  o.max_rows = 7;  // windows in three forward passes
  PerplexityResult r = perplexity(model, &same, random_tokens(64, 67, 2), o);
  ASSERT_TRUE(r.kl.has_value());
  EXPECT_EQ(r.kl->kl_mean, 0.0);
  EXPECT_EQ(r.kl->kl_p99, 0.0);
  EXPECT_EQ(r.kl->top1_agreement, 1.0);
  EXPECT_EQ(r.kl->base_ppl, r.ppl);
  EXPECT_GT(r.ppl, 1.0);
}

TEST(Perplexity, AnotherDtypeHasSmallPositiveKl) {
  auto backend = cpu_backend();
  LlamaHostWeights w = random_llama_weights(small_config(), 9, 2.5);
  LlamaOptions q8;
  q8.dtype = DType::q8_0;
  LlamaModel quantized(*backend, w, "q8_0", q8);
  LlamaModel base(*backend, w, "f32", LlamaOptions{});
  PerplexityOptions o;
  o.n_ctx = 32;
  PerplexityResult r = perplexity(quantized, &base, random_tokens(96, 67, 3), o);
  ASSERT_TRUE(r.kl.has_value());
  EXPECT_GT(r.kl->kl_mean, 0.0);
  EXPECT_LT(r.kl->kl_mean, 0.05);
  EXPECT_GE(r.kl->kl_p99, r.kl->kl_mean);
  EXPECT_LE(r.kl->kl_p99, r.kl->kl_max);
  EXPECT_GT(r.kl->top1_agreement, 0.5);
  EXPECT_NE(r.ppl, r.kl->base_ppl);
}

// KL(p || uniform) = log V - H(p): the test model predicts uniformly, the base's p comes from the
// naive forward, position by position.
TEST(Perplexity, KlAgainstAUniformModelIsLogVocabularyMinusEntropy) {
  auto backend = cpu_backend();
  LlamaHostWeights w = random_llama_weights(small_config(), 13, 2.5);
  LlamaModel base(*backend, w, "base", LlamaOptions{});
  LlamaHostWeights flat = random_llama_weights(small_config(), 14, 2.0);
  std::memset(flat.classifier.data(), 0, flat.classifier.nbytes());
  LlamaModel uniform(*backend, flat, "uniform", LlamaOptions{});
  const std::vector<int32_t> tokens = random_tokens(24, 67, 15);
  PerplexityOptions o;
  o.n_ctx = 12;
  o.bos = 1;
  PerplexityResult r = perplexity(uniform, &base, tokens, o);
  ASSERT_TRUE(r.kl.has_value());
  std::vector<double> kl;
  int64_t same_top = 0;
  for (int64_t win = 0; win < 2; ++win) {
    NaiveLlama naive(w);
    std::vector<int32_t> window(tokens.begin() + win * 12, tokens.begin() + (win + 1) * 12);
    window[0] = 1;
    for (int64_t p = 0; p + 1 < 12; ++p) {
      std::vector<double> z = naive_forward(naive, window[p], p);
      if (p < 6) continue;
      const double max = *std::max_element(z.begin(), z.end());
      double sum = 0.0;
      for (double v : z) sum += std::exp(v - max);
      double neg_entropy = 0.0;
      for (double v : z) {
        const double log_p = v - max - std::log(sum);
        neg_entropy += std::exp(log_p) * log_p;
      }
      kl.push_back(std::log(67.0) + neg_entropy);
      same_top += std::max_element(z.begin(), z.end()) == z.begin() ? 1 : 0;  // uniform: token 0
    }
  }
  double mean = 0.0;
  for (double v : kl) mean += v / double(kl.size());
  EXPECT_NEAR(r.kl->kl_mean, mean, 1e-5 * mean);
  EXPECT_NEAR(r.kl->kl_max, *std::max_element(kl.begin(), kl.end()), 1e-5 * mean);
  EXPECT_EQ(r.kl->top1_agreement, double(same_top) / double(kl.size()));
  EXPECT_NEAR(r.ppl, 67.0, 1e-9);
}

// The same figure computed here from the naive forward: each window restarted with BOS, and the
// predictions at positions n_ctx/2 .. n_ctx-2 scored, as llama.cpp's perplexity does.
TEST(Perplexity, MatchesADirectComputationFromTheNaiveForward) {
  auto backend = cpu_backend();
  LlamaHostWeights w = random_llama_weights(small_config(), 10, 2.5);
  LlamaModel model(*backend, w, "m", LlamaOptions{});
  const std::vector<int32_t> tokens = random_tokens(45, 67, 4);
  for (bool bos : {true, false}) {
    PerplexityOptions o;
    o.n_ctx = 14;
    o.max_rows = 5;
    if (bos) o.bos = 1;
    PerplexityResult r = perplexity(model, nullptr, tokens, o);
    double nll = 0.0;
    int64_t n = 0;
    for (int64_t win = 0; win < 3; ++win) {  // 45 tokens: three windows of 14
      NaiveLlama naive(w);
      std::vector<int32_t> window(tokens.begin() + win * 14, tokens.begin() + (win + 1) * 14);
      if (bos) window[0] = 1;
      for (int64_t p = 0; p + 1 < 14; ++p) {
        std::vector<double> z = naive_forward(naive, window[p], p);
        if (p < 7) continue;
        double max = z[0];
        for (double v : z) max = std::max(max, v);
        double sum = 0.0;
        for (double v : z) sum += std::exp(v - max);
        nll += max + std::log(sum) - z[window[p + 1]];
        ++n;
      }
    }
    EXPECT_EQ(r.n_tokens, n);
    EXPECT_NEAR(r.ppl, std::exp(nll / double(n)), 1e-5 * r.ppl) << (bos ? "with BOS" : "without BOS");
  }
}

TEST(Perplexity, RefusesWhatItCannotScore) {
  auto backend = cpu_backend();
  LlamaHostWeights w = random_llama_weights(small_config(), 11, 2.0);
  LlamaModel model(*backend, w, "m", LlamaOptions{});
  PerplexityOptions o;
  o.n_ctx = 32;
  EXPECT_THROW(perplexity(model, nullptr, random_tokens(31, 67, 5), o), Error);  // not one window
  o.n_ctx = 3;
  EXPECT_THROW(perplexity(model, nullptr, random_tokens(31, 67, 5), o), Error);  // no second half
  o.n_ctx = 65;
  EXPECT_THROW(perplexity(model, nullptr, random_tokens(200, 67, 5), o), Error);  // past the context
  LlamaConfig other = small_config();
  other.vocab_size = 70;
  LlamaModel wider(*backend, random_llama_weights(other, 12, 2.0), "wider", LlamaOptions{});
  o.n_ctx = 16;
  EXPECT_THROW(perplexity(model, &wider, random_tokens(40, 67, 5), o), Error);  // vocabularies differ
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

TEST(PerplexityCli, JsonFromAnIdsFileAndOneLineErrors) {
  ScratchDir dir("perplexity");
  const std::string model = dir.file("m.bin");
  CliResult made = run_cli({"make-model", "-o", model, "--dim", "64", "--layers", "2", "--heads", "4", "--vocab",
                            "300", "--seq-len", "64"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  std::string ids;  // commas, spaces and newlines all separate ids
  int i = 0;
  for (int32_t t : random_tokens(70, 300, 6)) ids += std::to_string(t) + (++i % 3 ? ", " : "\n");
  write_text(dir.file("ids.txt"), ids);
  CliResult r = run_cli({"perplexity", "-m", model, "--device", "cpu", "--ids", dir.file("ids.txt"), "-c", "32",
                         "--dtype", "q8_0", "--kl-base", "f32", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["n_windows"], 2);  // 70 tokens: two windows of 32
  EXPECT_EQ(j["n_tokens"], 2 * 15);
  EXPECT_EQ(j["dtype"], "q8_0");
  EXPECT_EQ(j["base_dtype"], "f32");
  for (const char* key : {"ppl", "kl_mean", "kl_p99", "top1_agreement"}) EXPECT_TRUE(j[key].is_number()) << key;
  EXPECT_GT(j["ppl"].get<double>(), 1.0);
  EXPECT_GT(j["kl_mean"].get<double>(), 0.0);
  // Against another file: the same weights written in q4_0 against the f32 file they came from
  // (their KL is the q4_0 run's KL from f32 above, or more), and against itself (KL 0).
  const std::string q4 = dir.file("m-q4_0.gguf");
  made = run_cli({"make-model", "-o", q4, "--format", "gguf", "--dtype", "q4_0", "--dim", "64", "--layers", "2", "--heads",
                  "4", "--vocab", "300", "--seq-len", "64"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  for (const std::string& base : {model, q4}) {
    CliResult k = run_cli({"perplexity", "-m", q4, "--device", "cpu", "--ids", dir.file("ids.txt"), "-c", "32",
                           "--kl-base-model", base, "-o", "json"});
    ASSERT_EQ(k.exit_code, 0) << k.err;
    nlohmann::json kj = nlohmann::json::parse(k.out);
    if (base == q4) {
      EXPECT_EQ(kj["kl_mean"].get<double>(), 0.0);
      EXPECT_EQ(kj["top1_agreement"].get<double>(), 1.0);
    } else {
      EXPECT_GT(kj["kl_mean"].get<double>(), j["kl_mean"].get<double>()) << "q4_0 loses more than q8_0";
    }
  }

  write_text(dir.file("bad.txt"), "1,2,300,4");
  write_text(dir.file("empty.txt"), " ,\n");
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--ids", dir.file("bad.txt")}, "token 2"},  // 300 is past the vocabulary
      {{"--ids", dir.file("empty.txt")}, "no token ids"},
      {{"--ids", dir.file("ids.txt"), "-c", "128"}, "-c"},  // a window past the model's context
      {{"--ids", dir.file("ids.txt"), "-c", "64", "--chunks", "0"}, "--chunks"},
      {{"-i", "text without a tokenizer"}, "needs a tokenizer"},
      {{"--ids", dir.file("ids.txt"), "-o", "xml"}, "is not md or json"},
      {{"--ids", dir.file("ids.txt"), "--kl-base", "i32"}, "--kl-base"},
      {{"--ids", dir.file("ids.txt"), "--kl-base", "f32", "--kl-base-model", model}, "give one base"},
      {{"--ids", dir.file("ids.txt"), "--kl-base-model", dir.file("none.gguf")}, "none.gguf"},
      {{"--ids", dir.file("ids.txt"), "-i", "both"}, "one of them"},
  };
  for (const auto& [extra, message] : refused) {
    std::vector<std::string> args = {"perplexity", "-m", model, "--device", "cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult bad = run_cli(args);
    EXPECT_EQ(bad.exit_code, 1) << extra[0] << " " << extra[1];
    EXPECT_NE(bad.err.find(message), std::string::npos) << bad.err;
  }
}

// Each window starts with BOS where the model's tokenizer puts BOS before a text (Llama 2's), as
// llama-perplexity does, and with its own first token where it puts none (Qwen2's tokenizer.json);
// --bos and --no-bos choose either way.
TEST(PerplexityCli, WindowsStartWithBosWhereTheModelPutsIt) {
  ScratchDir dir("perplexity-bos");
  std::string ids;
  for (int32_t t : random_tokens(40, 200, 3)) ids += std::to_string(t + 3) + ",";  // never BOS itself
  write_text(dir.file("ids.txt"), ids);
  auto ppl = [&](const std::string& model, const std::string& flag) {
    std::vector<std::string> args = {"perplexity", "-m", model, "--ids", dir.file("ids.txt"), "-c", "16", "-o", "json"};
    if (!flag.empty()) args.push_back(flag);
    CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out)["ppl"].get<double>() : -1.0;
  };
  const std::string llama = MINFER_SOURCE_DIR "/tests/data/models/llama2-f32.gguf";
  const std::string qwen = MINFER_SOURCE_DIR "/tests/data/models/qwen2-f32";
  EXPECT_EQ(ppl(llama, ""), ppl(llama, "--bos"));
  EXPECT_NE(ppl(llama, ""), ppl(llama, "--no-bos"));
  EXPECT_EQ(ppl(qwen, ""), ppl(qwen, "--no-bos"));
  EXPECT_NE(ppl(qwen, ""), ppl(qwen, "--bos"));
  CliResult both = run_cli({"perplexity", "-m", qwen, "--ids", dir.file("ids.txt"), "-c", "16", "--bos", "--no-bos"});
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_NE(both.err.find("--bos and --no-bos: give one"), std::string::npos) << both.err;
}

}  // namespace
}  // namespace minfer::test
