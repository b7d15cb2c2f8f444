// Logprobs of sampled tokens (engine/logprobs.h): log-softmax of the raw logits row, the top ones
// sorted with ties by index; and through the scheduler, each delivered token's logprob equals minus
// its NLL as `minfer perplexity` computes it (log_sum_exp over a Decoder's every-row logits of the
// same ids), even where a bias and a penalty changed which token was sampled.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/decoder.h"
#include "engine/logprobs.h"
#include "engine/perplexity.h"
#include "engine/scheduler.h"
#include "model/llama.h"
#include "tests/random_llama.h"

namespace minfer::test {
namespace {

TEST(RowLogprobs, LogSoftmaxOfTheRawRowAndTheTopSortedTiesByIndex) {
  RowLogprobs logprobs(5);
  const std::vector<float> row = {1.0f, 3.0f, 3.0f, 0.0f, 2.0f};
  const double lse = std::log(std::exp(1.0) + 2 * std::exp(3.0) + 1.0 + std::exp(2.0));
  logprobs.read(row.data(), 3);
  const SampledLogprobs s = logprobs.of(3);
  EXPECT_EQ(s.sampled.token, 3);
  EXPECT_NEAR(s.sampled.logprob, 0.0 - lse, 1e-6);
  ASSERT_EQ(s.n_top, 3);
  const int32_t order[] = {1, 2, 4};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(s.top[i].token, order[i]) << i;
    EXPECT_NEAR(s.top[i].logprob, row[size_t(order[i])] - lse, 1e-6) << i;
  }
  logprobs.read(row.data(), 0);
  EXPECT_EQ(logprobs.of(1).n_top, 0);
  logprobs.read(row.data(), 5);  // all of them
  EXPECT_EQ(logprobs.of(1).top[4].token, 3);
  EXPECT_THROW(logprobs.read(row.data(), RowLogprobs::kMaxTopLogprobs + 1), Error);
}

LlamaConfig small_config() { return small_gqa_config(67, 64); }

TEST(SchedulerLogprobs, EachTokensLogprobIsMinusItsPerplexityNll) {
  BackendOptions bo;
  bo.threads = 2;
  auto backend = make_backend(BackendKind::cpu, bo);
  LlamaModel model(*backend, random_llama_weights(small_config(), 5, 2.5), "m", LlamaOptions{});
  SchedulerOptions so;
  so.slots = 2;
  Scheduler scheduler(model, so);
  const std::vector<int32_t> prompt = {1, 20, 33, 7, 40};
  struct Case {
    float temperature;
    SamplingOptions sampling;
  };
  SamplingOptions biased;
  biased.logit_bias = {{9, 8.0f}};
  biased.frequency_penalty = 1.5f;
  for (const Case& c : {Case{0.0f, {}}, Case{0.0f, biased}, Case{0.9f, biased}}) {
    std::vector<int32_t> tokens;
    std::vector<SampledLogprobs> got;
    std::vector<std::vector<TokenLogprob>> tops;
    ServeRequest r;
    r.prompt = prompt;
    r.max_tokens = 12;
    r.temperature = c.temperature;
    r.sampling = c.sampling;
    r.stop_at_eos = false;
    r.top_logprobs = 4;
    r.on_logprobs = [&](const SampledLogprobs& s) {
      got.push_back(s);
      tops.emplace_back(s.top, s.top + s.n_top);
    };
    r.on_token = [&](int32_t t) {
      tokens.push_back(t);
      return true;
    };
    scheduler.submit(r);
    while (scheduler.step()) {
    }
    ASSERT_EQ(tokens.size(), 12u);
    ASSERT_EQ(got.size(), 12u);
    // The same ids through a scoring decoder, as engine/perplexity.cpp scores them.
    DecoderOptions d;
    d.n_seqs = 1;
    d.n_ctx = 64;
    d.pass_rows = 64;
    d.logits_every_row = true;
    Decoder scorer(model, d);
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), tokens.begin(), tokens.end());
    std::vector<double> expected;  // the logprob of all[p + 1] after all[0..p]
    std::vector<int32_t> best;
    scorer.prefill_scored(0, all, [&](int64_t p, const float* z) {
      if (p + 1 < int64_t(prompt.size()) || p + 1 >= int64_t(all.size())) return;
      expected.push_back(double(z[all[size_t(p + 1)]]) - log_sum_exp(z, 67));
      best.push_back(int32_t(std::max_element(z, z + 67) - z));
    });
    ASSERT_EQ(expected.size(), 12u);
    for (size_t k = 0; k < 12; ++k) {
      EXPECT_EQ(got[k].sampled.token, tokens[k]);
      EXPECT_NEAR(got[k].sampled.logprob, expected[k], 1e-4) << "token " << k << ", temperature " << c.temperature;
      ASSERT_EQ(tops[k].size(), 4u);
      EXPECT_EQ(tops[k][0].token, best[k]) << k;
      for (size_t j = 1; j < 4; ++j) EXPECT_GE(tops[k][j - 1].logprob, tops[k][j].logprob) << k;
      if (c.sampling.logit_bias.empty() && c.temperature == 0.0f) {
        EXPECT_EQ(tops[k][0].logprob, got[k].sampled.logprob) << "greedy: the sampled token is the top one";
      }
    }
    if (!c.sampling.logit_bias.empty()) {
      EXPECT_NE(std::count(tokens.begin(), tokens.end(), 9), 0) << "the bias made token 9 likely";
    }
  }
}

}  // namespace
}  // namespace minfer::test
