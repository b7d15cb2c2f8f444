// The prompt's logprobs through the scheduler (ServeRequest::prompt_logprobs, OpenAI's legacy
// `echo` with `logprobs`): each prompt token's logprob after the first equals minus its NLL as
// `minfer perplexity` computes it (log_sum_exp over a Decoder's every-row logits of the same ids),
// at the per-pass limit of 1 + kPromptLogitsRows rows and one past it, with max_tokens 0 (the
// prompt only) and with generated tokens after it, with the prompt's first blocks cached by an
// earlier request (they are computed again: no row is lost), and preempted halfway (each once).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/decoder.h"
#include "engine/perplexity.h"
#include "engine/scheduler.h"
#include "model/llama.h"
#include "tests/random_llama.h"

namespace minfer::test {
namespace {

constexpr int64_t kVocab = 67;

LlamaConfig small_config() { return small_gqa_config(kVocab, 96); }

std::vector<int32_t> prompt_of(int64_t n) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(int32_t((i * 37 + 11) % kVocab));
  return p;
}

// What one request got: the prompt's entries by index, its tokens and how it ended.
struct Got {
  std::vector<int64_t> indices;
  std::vector<TokenLogprob> entries;   // each scored prompt token's own entry
  std::vector<int32_t> best;           // ... and its most likely token
  std::vector<int32_t> tokens;
  RequestStats stats;
  bool finished = false;
};

ServeRequest echo_request(const std::vector<int32_t>& prompt, int64_t max_tokens, Got* got) {
  ServeRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.temperature = 0.0f;
  r.stop_at_eos = false;
  r.top_logprobs = 2;
  r.prompt_logprobs = true;
  r.on_prompt_logprobs = [got](int64_t index, const SampledLogprobs& s) {
    got->indices.push_back(index);
    got->entries.push_back(s.sampled);
    got->best.push_back(s.n_top > 0 ? s.top[0].token : -1);
  };
  r.on_token = [got](int32_t t) {
    got->tokens.push_back(t);
    return true;
  };
  r.on_finish = [got](const RequestStats& stats) {
    got->stats = stats;
    got->finished = true;
  };
  return r;
}

class PromptLogprobs : public ::testing::Test {
 protected:
  void SetUp() override {
    BackendOptions bo;
    bo.threads = 2;
    backend_ = make_backend(BackendKind::cpu, bo);
    model_ = std::make_unique<LlamaModel>(*backend_, random_llama_weights(small_config(), 7, 2.5), "m", LlamaOptions{});
  }
  // Every prompt token's logprob after the first, and the most likely token there, as perplexity scores them.
  void expect_perplexity_values(const std::vector<int32_t>& prompt, const Got& got) {
    DecoderOptions d;
    d.n_seqs = 1;
    d.n_ctx = 96;
    d.pass_rows = 96;
    d.logits_every_row = true;
    Decoder scorer(*model_, d);
    std::vector<double> expected;
    std::vector<int32_t> best;
    scorer.prefill_scored(0, prompt, [&](int64_t p, const float* z) {
      if (p + 1 >= int64_t(prompt.size())) return;
      expected.push_back(double(z[prompt[size_t(p + 1)]]) - log_sum_exp(z, kVocab));
      best.push_back(int32_t(std::max_element(z, z + kVocab) - z));
    });
    ASSERT_EQ(got.indices.size(), prompt.size() - 1) << "a logprob for every prompt token but the first";
    for (size_t k = 0; k < expected.size(); ++k) {
      EXPECT_EQ(got.indices[k], int64_t(k + 1));
      EXPECT_EQ(got.entries[k].token, prompt[k + 1]) << k;
      EXPECT_NEAR(got.entries[k].logprob, expected[k], 1e-4) << "prompt token " << k + 1;
      EXPECT_EQ(got.best[k], best[k]) << k;
    }
  }
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<LlamaModel> model_;
};

// A prompt of exactly the rows a pass has for it (1 + kPromptLogitsRows: one step), and one past
// (two steps: the first one full), with max_tokens 0 and 3.
TEST_F(PromptLogprobs, EqualMinusPerplexityNllAtThePerPassLimitAndOnePast) {
  SchedulerOptions so;
  so.slots = 2;
  Scheduler scheduler(*model_, so);
  for (int64_t length : {int64_t(2), 1 + kPromptLogitsRows, 2 + kPromptLogitsRows}) {
    for (int64_t max_tokens : {0, 3}) {
      const std::vector<int32_t> prompt = prompt_of(length);
      Got got;
      scheduler.submit(echo_request(prompt, max_tokens, &got));
      std::vector<int64_t> rows;
      while (scheduler.step()) rows.push_back(scheduler.last_step_prompt_rows());
      ASSERT_TRUE(got.finished);
      SCOPED_TRACE("prompt of " + std::to_string(length) + ", max_tokens " + std::to_string(max_tokens));
      expect_perplexity_values(prompt, got);
      EXPECT_EQ(rows[0], std::min(length, 1 + kPromptLogitsRows)) << "the first pass takes what it may";
      if (length > 1 + kPromptLogitsRows) {
        EXPECT_EQ(rows[1], length - 1 - kPromptLogitsRows);
      }
      EXPECT_EQ(got.tokens.size(), size_t(max_tokens));
      EXPECT_EQ(got.stats.completion_tokens, max_tokens);
      EXPECT_EQ(got.stats.reason, FinishReason::length);
    }
  }
}

// Two scored prompts in one step share the extra logits rows; a plain request's rows decode beside them.
TEST_F(PromptLogprobs, ConcurrentRequestsShareThePassesLogitsRows) {
  SchedulerOptions so;
  so.slots = 3;
  Scheduler scheduler(*model_, so);
  const std::vector<int32_t> a = prompt_of(40), b = prompt_of(29);
  Got got_a, got_b, plain;
  scheduler.submit(echo_request(a, 2, &got_a));
  scheduler.submit(echo_request(b, 0, &got_b));
  ServeRequest r = echo_request(prompt_of(7), 5, &plain);
  r.prompt_logprobs = false;
  scheduler.submit(r);
  while (scheduler.step()) {
  }
  expect_perplexity_values(a, got_a);
  expect_perplexity_values(b, got_b);
  EXPECT_TRUE(plain.indices.empty());
  EXPECT_EQ(plain.tokens.size(), 5u);
}

// A prompt whose first blocks an earlier request left cached is computed whole: no row is lost.
TEST_F(PromptLogprobs, ACachedPrefixIsComputedAgain) {
  SchedulerOptions so;
  so.slots = 1;
  so.kv_block_size = 8;
  Scheduler scheduler(*model_, so);
  const std::vector<int32_t> prompt = prompt_of(30);
  Got first;
  ServeRequest plain = echo_request(prompt, 1, &first);
  plain.prompt_logprobs = false;
  scheduler.submit(plain);
  while (scheduler.step()) {
  }
  Got again;
  ServeRequest cached_too = echo_request(prompt, 1, &again);
  cached_too.prompt_logprobs = false;
  scheduler.submit(cached_too);
  while (scheduler.step()) {
  }
  ASSERT_GT(again.stats.cached_tokens, 0) << "the fixture must leave the prompt's blocks cached";
  Got got;
  scheduler.submit(echo_request(prompt, 1, &got));
  while (scheduler.step()) {
  }
  EXPECT_EQ(got.stats.cached_tokens, 0);
  expect_perplexity_values(prompt, got);
}

// A request preempted halfway through its scored prompt computes it again and gives each prompt
// token's logprobs once, in order.
TEST_F(PromptLogprobs, APreemptedPromptGivesEachLogprobOnce) {
  SchedulerOptions so;
  so.slots = 2;
  so.pass_rows = 4;  // the scored prompt takes 3 rows a step beside the other's decode row
  so.kv_block_size = 8;
  so.kv_blocks = 9;  // 1 + 8 blocks at first: the other's second block preempts the scored prompt
  Scheduler scheduler(*model_, so);
  Got other;
  ServeRequest grows = echo_request(prompt_of(3), 20, &other);
  grows.prompt_logprobs = false;
  scheduler.submit(grows);
  const std::vector<int32_t> prompt = prompt_of(60);
  Got got;
  scheduler.submit(echo_request(prompt, 1, &got));
  while (scheduler.step()) {
  }
  ASSERT_EQ(scheduler.metrics().preemptions, 1u) << "the fixture must preempt the scored prompt";
  ASSERT_TRUE(got.finished);
  expect_perplexity_values(prompt, got);
  EXPECT_EQ(other.tokens.size(), 20u);
}

TEST_F(PromptLogprobs, MaxTokensZeroOnlyWithThePromptsLogprobs) {
  SchedulerOptions so;
  so.slots = 1;
  Scheduler scheduler(*model_, so);
  Got got;
  ServeRequest r = echo_request(prompt_of(4), 0, &got);
  r.prompt_logprobs = false;
  EXPECT_THROW(scheduler.submit(r), Error);
  r = echo_request(prompt_of(4), 0, &got);
  r.top_logprobs = -1;
  EXPECT_THROW(scheduler.submit(r), Error);
  r = echo_request(prompt_of(4), -1, &got);
  EXPECT_THROW(scheduler.submit(r), Error);
  EXPECT_NO_THROW(scheduler.submit(echo_request(prompt_of(1), 0, &got)));
  while (scheduler.step()) {
  }
  EXPECT_TRUE(got.finished);
  EXPECT_TRUE(got.indices.empty()) << "a prompt of one token has no logprobs";
}

}  // namespace
}  // namespace minfer::test
