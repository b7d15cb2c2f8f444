// Speculative decoding (engine/speculative.h): greedy output identical to plain decoding for every
// k and drafter; the accept/reject rule statistically equal to the target's distribution, where a
// wrong rule is caught by the same test; the decoder's every-row logits and rewind; bad drafters refused.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/decoder.h"
#include "engine/speculative.h"
#include "formats/model_files.h"
#include "model/llama.h"
#include "tests/random_llama.h"
#include "tests/test_support.h"

namespace minfer::test {
namespace {

// ---- prompt lookup ----

TEST(Speculative, LookupDraftsWhatFollowedTheMostRecentLongestMatch) {
  int32_t draft[8] = {};
  auto lookup = [&](const std::vector<int32_t>& context, int64_t ngram, int64_t min_match, int64_t k) {
    const int64_t n = lookup_draft(context.data(), int64_t(context.size()), ngram, min_match, k, draft);
    return std::vector<int32_t>(draft, draft + n);
  };
  // "7 8 9" occurs at 0 and 5; the most recent earlier one (5) is followed by 4 5 6 7 8 9.
  const std::vector<int32_t> repeat = {7, 8, 9, 1, 2, 7, 8, 9, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(lookup(repeat, 3, 1, 8), (std::vector<int32_t>{4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(lookup(repeat, 3, 1, 2), (std::vector<int32_t>{4, 5}));  // k caps it
  // "3 9" occurs earlier at 3 (then 5 6 9); "9" alone most recently at 7 (then 4 3 9): the
  // longest suffix wins, and the shorter one is used when ngram allows no more.
  const std::vector<int32_t> both = {9, 1, 2, 3, 9, 5, 6, 9, 4, 3, 9};
  EXPECT_EQ(lookup(both, 2, 1, 3), (std::vector<int32_t>{5, 6, 9}));
  EXPECT_EQ(lookup(both, 1, 1, 3), (std::vector<int32_t>{4, 3, 9}));
  // No earlier "3 9" here: the 1-token match, unless min_match asks for 2.
  const std::vector<int32_t> single = {9, 1, 2, 5, 9, 5, 6, 9, 4, 3, 9};
  EXPECT_EQ(lookup(single, 3, 1, 3), (std::vector<int32_t>{4, 3, 9}));
  EXPECT_EQ(lookup(single, 3, 2, 3), std::vector<int32_t>{});
  // Nothing repeats, or one token of context: nothing is drafted.
  EXPECT_EQ(lookup({1, 2, 3, 4}, 3, 1, 4), std::vector<int32_t>{});
  EXPECT_EQ(lookup({1}, 3, 1, 4), std::vector<int32_t>{});
}

// ---- the accept/reject rule, statistically ----

// Pearson's chi-square of `counts` against `expected` probabilities, cells expected below 5
// pooled into one; *dof is the degrees of freedom.
double chi_square(const std::vector<double>& counts, const std::vector<double>& expected, double n, int* dof) {
  double stat = 0.0, pooled_count = 0.0, pooled_expected = 0.0;
  int cells = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] * n < 5.0) {
      pooled_count += counts[i];
      pooled_expected += expected[i] * n;
      continue;
    }
    stat += (counts[i] - expected[i] * n) * (counts[i] - expected[i] * n) / (expected[i] * n);
    ++cells;
  }
  if (pooled_expected >= 5.0) {
    stat += (pooled_count - pooled_expected) * (pooled_count - pooled_expected) / pooled_expected;
    ++cells;
  } else {
    EXPECT_LE(pooled_count, 20.0) << "tokens the target almost never gives came out often";
  }
  *dof = cells - 1;
  return stat;
}

// The chi-square value a correct rule exceeds with probability 1e-4 (Wilson-Hilferty).
double chi_square_bound(int dof) {
  const double z = 3.719, d = double(dof);
  return d * std::pow(1.0 - 2.0 / (9.0 * d) + z * std::sqrt(2.0 / (9.0 * d)), 3.0);
}

using Rule = Verdict (*)(float*, const float*, int64_t, int32_t, float, float);

// A plausible mistake: on a rejection, draw from the target's p instead of max(0, p - q).
Verdict resample_from_p(float* p, const float* q, int64_t n, int32_t token, float accept_coin, float resample_coin) {
  const float q_token = q ? q[token] : 1.0f;
  if (accept_coin * q_token < p[token]) return {true, token};
  return {false, sample_mult(p, n, resample_coin)};
}

// One drafted token per trial, drawn from q, judged by `rule`: the histogram of what comes out.
double rule_chi_square(Rule rule, const std::vector<float>& p, const std::vector<float>* q, int32_t fixed_draft,
                       int trials, int* dof) {
  const int64_t n = static_cast<int64_t>(p.size());
  std::vector<double> counts(p.size(), 0.0);
  uint64_t rng = 12345;
  std::vector<float> scratch(p.size());
  for (int t = 0; t < trials; ++t) {
    const int32_t draft = q ? sample_mult(q->data(), n, random_f32(&rng)) : fixed_draft;
    scratch = p;
    const float accept_coin = random_f32(&rng);
    const Verdict v = rule(scratch.data(), q ? q->data() : nullptr, n, draft, accept_coin, random_f32(&rng));
    counts[v.token] += 1.0;
  }
  return chi_square(counts, std::vector<double>(p.begin(), p.end()), trials, dof);
}

TEST(Speculative, AcceptOrResampleGivesTheTargetsDistributionAndAWrongRuleIsCaught) {
  const std::vector<float> p = {0.30f, 0.05f, 0.20f, 0.02f, 0.13f, 0.10f, 0.15f, 0.05f};
  const std::vector<float> q = {0.05f, 0.30f, 0.10f, 0.25f, 0.05f, 0.10f, 0.05f, 0.10f};
  const int trials = 200000;
  int dof = 0;
  const double right = rule_chi_square(accept_or_resample, p, &q, -1, trials, &dof);
  EXPECT_LT(right, chi_square_bound(dof)) << "dof " << dof;
  const double wrong = rule_chi_square(resample_from_p, p, &q, -1, trials, &dof);
  EXPECT_GT(wrong, chi_square_bound(dof)) << "the test cannot tell a wrong rule from the right one";
  // A drafter certain of its token (prompt lookup): q is a point at it.
  for (int32_t fixed : {0, 3}) {
    const double right_point = rule_chi_square(accept_or_resample, p, nullptr, fixed, trials, &dof);
    EXPECT_LT(right_point, chi_square_bound(dof)) << fixed;
    const double wrong_point = rule_chi_square(resample_from_p, p, nullptr, fixed, trials, &dof);
    EXPECT_GT(wrong_point, chi_square_bound(dof)) << fixed;
  }
  // q == p accepts everything; a token the target gives no mass is never accepted.
  std::vector<float> same = p;
  EXPECT_TRUE(accept_or_resample(same.data(), p.data(), 8, 3, 0.999f, 0.5f).accepted);
  std::vector<float> zero = {0.5f, 0.5f, 0.0f};
  const std::vector<float> q3 = {0.2f, 0.2f, 0.6f};
  const Verdict v = accept_or_resample(zero.data(), q3.data(), 3, 2, 0.0f, 0.5f);
  EXPECT_FALSE(v.accepted);
  EXPECT_NE(v.token, 2);
}

TEST(Speculative, SamplerDistributionIsWhatSampleDraws) {
  // The nucleus distribution() writes is the one sample() draws from: a chi-square over draws.
  const int64_t V = 12;
  std::vector<float> logits(V);
  for (int64_t i = 0; i < V; ++i) logits[i] = std::sin(float(i) * 1.7f) * 2.0f;
  Sampler sampler(V, 0.8f, 0.85f, 99);
  std::vector<float> dist = logits;
  sampler.distribution(dist.data());
  double sum = 0.0;
  int zeros = 0;
  for (float x : dist) {
    sum += x;
    zeros += x == 0.0f;
  }
  EXPECT_NEAR(sum, 1.0, 1e-5);
  EXPECT_GT(zeros, 0) << "top-p 0.85 must cut some of 12 tokens";
  std::vector<double> counts(V, 0.0);
  const int trials = 100000;
  std::vector<float> scratch(V);
  for (int t = 0; t < trials; ++t) {
    scratch = logits;
    counts[sampler.sample(scratch.data())] += 1.0;
  }
  int dof = 0;
  const double stat = chi_square(counts, std::vector<double>(dist.begin(), dist.end()), trials, &dof);
  EXPECT_LT(stat, chi_square_bound(dof)) << "dof " << dof;
}

// ---- whole models ----

LlamaConfig small_vocab_config(int64_t vocab) {
  LlamaConfig c;
  c.dim = 32;
  c.hidden_dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = vocab;
  c.n_ctx = 64;
  return c;
}

std::vector<std::vector<int32_t>> plain_greedy(Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                               int64_t n_new) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& prompt : prompts) {
    DecoderOptions options;
    options.n_ctx = int64_t(prompt.size()) + n_new;
    Decoder decoder(model, options);
    GenerateOptions gen;
    gen.n_new = n_new;
    out.push_back(decoder.generate({prompt}, gen).tokens[0]);
  }
  return out;
}

GenerateResult speculative_run(Model& target, Model* draft, const std::vector<std::vector<int32_t>>& prompts,
                               const GenerateOptions& gen, int64_t k) {
  DecoderOptions options;
  options.n_seqs = int64_t(prompts.size());
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, int64_t(p.size()));
  options.n_ctx = longest + gen.n_new;
  options.logits_per_seq = k + 1;
  Decoder target_decoder(target, options);
  std::unique_ptr<Decoder> draft_decoder;
  if (draft) draft_decoder = std::make_unique<Decoder>(*draft, draft_decoder_options(options));
  SpeculativeOptions spec;
  spec.k = k;
  SpeculativeDecoder decoder(target_decoder, draft_decoder.get(), spec);
  return decoder.generate(prompts, gen);
}

void expect_greedy_identity(Model& target, Model* draft, const std::vector<std::vector<int32_t>>& prompts, int64_t n_new,
                            const std::string& label, double* acceptance = nullptr) {
  const auto expected = plain_greedy(target, prompts, n_new);
  GenerateOptions gen;
  gen.n_new = n_new;
  int64_t drafted = 0, accepted = 0;
  for (int64_t k = 1; k <= 8; ++k) {
    // Every prompt alone, then all of them as one batch (each sequence its own accepted length).
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(speculative_run(target, draft, {prompts[i]}, gen, k).tokens[0], expected[i])
          << label << ", k " << k << ", prompt " << i;
    const GenerateResult batch = speculative_run(target, draft, prompts, gen, k);
    EXPECT_EQ(batch.tokens, expected) << label << ", k " << k << ", batch of " << prompts.size();
    drafted += batch.drafted_tokens;
    accepted += batch.accepted_tokens;
  }
  if (acceptance) *acceptance = drafted > 0 ? double(accepted) / double(drafted) : 0.0;
}

TEST(Speculative, GreedyOutputIsThePlainOutputForEveryKAndDrafter) {
  // Random weights: the draft is the target in q8_0 (mostly right) or another model (mostly
  // wrong), and prompt lookup; acceptance rates from high to near zero.
  auto backend = make_backend(BackendKind::cpu);
  const LlamaConfig config = small_vocab_config(96);
  LlamaModel target(*backend, random_llama_weights(config, 21, 2.5), "target", {});
  LlamaOptions q8;
  q8.dtype = DType::q8_0;
  LlamaModel self_q8(*backend, random_llama_weights(config, 21, 2.5), "self q8_0", q8);
  LlamaModel other(*backend, random_llama_weights(config, 22, 2.5), "other", {});
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 5, 9}, {1}, {1, 40, 41, 42, 43, 44, 45, 46, 47}};
  double self_rate = 0.0, other_rate = 1.0;
  expect_greedy_identity(target, &self_q8, prompts, 40, "q8_0 self-draft", &self_rate);
  expect_greedy_identity(target, &other, prompts, 40, "another model", &other_rate);
  expect_greedy_identity(target, nullptr, prompts, 40, "prompt lookup");
  EXPECT_GT(self_rate, 0.5) << "the q8_0 copy should mostly agree with its f32 original";
  EXPECT_GT(self_rate, other_rate + 0.2) << "acceptance does not tell a good drafter from a bad one";
}

TEST(Speculative, GreedyOutputIsThePlainOutputWithExperts) {
  // A mixture of experts as the target (top 2 of 8, renormalised): a verifying pass groups its
  // up to k + 1 rows a sequence by expert, and every row must still get one-by-one decoding's token.
  auto backend = make_backend(BackendKind::cpu);
  LlamaConfig config = small_vocab_config(96);
  config.n_experts = 8;
  config.n_experts_used = 2;
  config.expert_hidden_dim = 40;
  config.normalize_expert_weights = true;
  LlamaModel target(*backend, random_llama_weights(config, 23, 2.5), "experts", {});
  LlamaOptions q8;
  q8.dtype = DType::q8_0;
  LlamaModel self_q8(*backend, random_llama_weights(config, 23, 2.5), "experts q8_0", q8);
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 5, 9}, {1}, {1, 40, 41, 42, 43, 44, 45, 46, 47}};
  double rate = 0.0;
  expect_greedy_identity(target, &self_q8, prompts, 40, "experts, q8_0 self-draft", &rate);
  expect_greedy_identity(target, nullptr, prompts, 40, "experts, prompt lookup");
  EXPECT_GT(rate, 0.5) << "the q8_0 copy should mostly agree with its f32 original";
}

TEST(Speculative, GreedyOutputIsRunCsOnTheTrainedModel) {
  SKIP_WITHOUT_GOLDEN("stories260K.bin");
  SKIP_WITHOUT_GOLDEN("stories260K.greedy.ids");
  auto backend = make_backend(BackendKind::cpu);
  auto target = load_model(golden_path("stories260K.bin"), *backend, {});
  LlamaOptions q8;
  q8.dtype = DType::q8_0;
  auto draft = load_model(golden_path("stories260K.bin"), *backend, q8);
  const std::vector<int32_t> golden = parse_ids(read_file(golden_path("stories260K.greedy.ids")));
  // run.c's own greedy run from BOS, by both drafters, for every k: id for id.
  GenerateOptions gen;
  gen.n_new = int64_t(golden.size());
  for (int64_t k : {1, 3, 4, 8}) {
    EXPECT_EQ(speculative_run(*target, draft.get(), {{1}}, gen, k).tokens[0], golden) << "q8_0 draft, k " << k;
    EXPECT_EQ(speculative_run(*target, nullptr, {{1}}, gen, k).tokens[0], golden) << "prompt lookup, k " << k;
  }
  // Prompts cut from that run, batched: sequences accept different lengths in the same passes.
  std::vector<std::vector<int32_t>> prompts;
  for (size_t cut : {3u, 17u, 40u}) {
    prompts.push_back({1});
    prompts.back().insert(prompts.back().end(), golden.begin(), golden.begin() + long(cut));
  }
  gen.n_new = 120;
  const auto expected = plain_greedy(*target, prompts, gen.n_new);
  for (int64_t k : {2, 5})
    EXPECT_EQ(speculative_run(*target, draft.get(), prompts, gen, k).tokens, expected) << "k " << k;
}

// Every joint outcome of the first four sampled tokens, counted over many seeds, against the
// target's own probabilities (computed by plain decoding, context by context): the whole path
// (drafting, the verify pass's rows, rewinds, the rule) must leave the target's distribution.
// k = 2 with 4 tokens drafts two tokens in a round (the draft's second distribution is used);
// k = 1 with 5 tokens has rounds that follow a fully accepted one (the draft catches up two tokens).
void expect_sampled_tokens_follow_the_target(int64_t k, int64_t n_new) {
  auto backend = make_backend(BackendKind::cpu);
  const int64_t V = 4, n_joint = 4;
  LlamaConfig config = small_vocab_config(V);
  config.shared_classifier = false;  // a shared one makes the last token by far the likeliest next
  LlamaModel target(*backend, random_llama_weights(config, 31, 1.0), "target", {});
  LlamaModel draft(*backend, random_llama_weights(config, 32, 1.0), "draft", {});
  // The classifier of these weights gives logits several units apart: a high temperature spreads them.
  const float temperature = 2.0f, top_p = 0.95f;

  // p(t1) p(t2 | t1) p(t3 | t1 t2) p(t4 | t1 t2 t3) from the target's logits and the sampler's distribution().
  std::vector<double> expected(size_t(V * V * V * V), 0.0);
  {
    DecoderOptions options;
    options.n_ctx = 8;
    Decoder decoder(target, options);
    Sampler sampler(V, temperature, top_p, 1);
    std::function<void(std::vector<int32_t>&, double, int64_t)> walk = [&](std::vector<int32_t>& context, double prob,
                                                                             int64_t index) {
      if (int64_t(context.size()) == n_joint + 1) {
        expected[size_t(index)] = prob;
        return;
      }
      decoder.reset();
      decoder.prefill({context});
      std::vector<float> p(decoder.logits(0), decoder.logits(0) + V);
      sampler.distribution(p.data());
      for (int32_t t = 0; t < V; ++t) {
        context.push_back(t);
        walk(context, prob * p[size_t(t)], index * V + t);
        context.pop_back();
      }
    };
    std::vector<int32_t> context = {0};
    walk(context, 1.0, 0);
  }
  DecoderOptions options;
  options.n_ctx = 8;
  options.logits_per_seq = k + 1;
  Decoder target_decoder(target, options);
  options.logits_per_seq = 1;
  options.pass_rows = 2;
  Decoder draft_decoder(draft, options);
  SpeculativeOptions spec;
  spec.k = k;
  SpeculativeDecoder speculative(target_decoder, &draft_decoder, spec);
  GenerateOptions gen;
  gen.n_new = n_new;
  gen.temperature = temperature;
  gen.top_p = top_p;
  gen.stop_at_eos = false;
  const int trials = 12000;
  std::vector<double> counts(expected.size(), 0.0);
  int64_t drafted = 0, accepted = 0, passes = 0;
  for (int t = 0; t < trials; ++t) {
    gen.seed = uint64_t(t) + 1;
    const GenerateResult r = speculative.generate({{0}}, gen);
    ASSERT_EQ(int64_t(r.tokens[0].size()), n_new);
    int64_t index = 0;
    for (int64_t i = 0; i < n_joint; ++i) index = index * V + r.tokens[0][size_t(i)];
    counts[size_t(index)] += 1.0;
    drafted += r.drafted_tokens;
    accepted += r.accepted_tokens;
    passes += r.decode_steps;
  }
  int dof = 0;
  const double stat = chi_square(counts, expected, trials, &dof);
  EXPECT_LT(stat, chi_square_bound(dof)) << "k " << k << ", dof " << dof;
  // Both ways through the rule were taken many times (so with k = 1 many rounds followed a fully
  // accepted one), and with k = 2 rounds drafted two tokens; the distribution is not a point.
  EXPECT_GT(accepted, trials / 10) << "k " << k;
  EXPECT_GT(drafted - accepted, trials / 10) << "k " << k;
  if (k > 1) {
    EXPECT_GT(drafted, passes) << "k " << k;
  }
  EXPECT_GE(dof, 20) << "too few likely outcomes to test a distribution";
}

TEST(Speculative, SampledTokensFollowTheTargetsDistribution) {
  expect_sampled_tokens_follow_the_target(2, 4);
  expect_sampled_tokens_follow_the_target(1, 5);
}

// ---- the decoder's part ----

TEST(Speculative, EveryRowLogitsAndRewindMatchTokenByTokenDecoding) {
  auto backend = make_backend(BackendKind::cpu);
  auto model = load_model("preset:tiny", *backend, {});
  const int64_t V = model->info().vocab_size;
  DecoderOptions options;
  options.n_ctx = 32;
  options.logits_per_seq = 5;
  Decoder decoder(*model, options);
  const std::vector<int32_t> prompt = {1, 7, 9}, rows = {11, 12, 13, 14};
  // Token by token: the logits after each of rows.
  std::vector<std::vector<float>> expected;
  decoder.prefill({prompt});
  for (int32_t t : rows) {
    decoder.decode({t});
    expected.emplace_back(decoder.logits(0), decoder.logits(0) + V);
  }
  auto check_rows = [&](const char* when) {
    for (int64_t i = 0; i < 4; ++i) {
      const float* got = decoder.logits_row(i);
      double err = 0.0, ref = 0.0;
      for (int64_t v = 0; v < V; ++v) {
        err += (got[v] - expected[i][v]) * double(got[v] - expected[i][v]);
        ref += expected[i][v] * double(expected[i][v]);
      }
      EXPECT_LT(err / ref, 1e-10) << when << ", row " << i;
    }
  };
  decoder.reset();
  decoder.prefill({prompt});
  decoder.forward_chunks({{0, rows.data(), 4, true, true}});
  EXPECT_EQ(decoder.position(0), 7);
  check_rows("one pass over four rows");
  // Back to after the first row, then other tokens over the stale entries of positions 4 to 6:
  // the logits must be those of a fresh run of prompt, 11, 21, 22 (attention reads only the
  // positions before each row, and the new rows overwrite the old keys and values).
  decoder.rewind(0, 4);
  EXPECT_EQ(decoder.position(0), 4);
  const std::vector<int32_t> other = {21, 22};
  decoder.forward_chunks({{0, other.data(), 2, true, true}});
  std::vector<std::vector<float>> got = {{decoder.logits_row(0), decoder.logits_row(0) + V},
                                         {decoder.logits_row(1), decoder.logits_row(1) + V}};
  Decoder fresh(*model, options);
  fresh.prefill({{1, 7, 9, 11}});
  for (size_t i = 0; i < other.size(); ++i) {
    fresh.decode({other[i]});
    double err = 0.0, ref = 0.0;
    for (int64_t v = 0; v < V; ++v) {
      const double want = fresh.logits(0)[v];
      err += (got[i][size_t(v)] - want) * (got[i][size_t(v)] - want);
      ref += want * want;
    }
    EXPECT_LT(err / ref, 1e-10) << "after rewind, row " << i;
  }
  EXPECT_EQ(decoder.position(0), 6);
  EXPECT_THROW(decoder.rewind(0, 7), Error) << "rewind goes back, never forward";
  decoder.rewind(0, 3);
  const std::vector<int32_t> six = {1, 2, 3, 4, 5, 6};
  EXPECT_THROW(decoder.forward_chunks({{0, six.data(), 6, true, true}}), Error) << "6 logits rows in room for 5";
}

TEST(Speculative, BadDraftersAndOptionsAreRefused) {
  auto backend = make_backend(BackendKind::cpu);
  LlamaModel target(*backend, random_llama_weights(small_vocab_config(96), 1, 2.0), "target", {});
  LlamaModel smaller(*backend, random_llama_weights(small_vocab_config(80), 2, 2.0), "smaller", {});
  DecoderOptions options;
  options.n_ctx = 32;
  options.logits_per_seq = 5;
  Decoder target_decoder(target, options);
  Decoder other_vocab(smaller, options);
  SpeculativeOptions spec;
  EXPECT_NE(error_of([&] { SpeculativeDecoder refused(target_decoder, &other_vocab, spec); }).find("80 tokens and the target's 96"), std::string::npos) << error_of([&] { SpeculativeDecoder refused(target_decoder, &other_vocab, spec); });
  spec.k = 5;
  EXPECT_NE(error_of([&] { SpeculativeDecoder refused(target_decoder, nullptr, spec); }).find("room for 6 logits rows"), std::string::npos) << error_of([&] { SpeculativeDecoder refused(target_decoder, nullptr, spec); });
  spec.k = 0;
  EXPECT_NE(error_of([&] { SpeculativeDecoder refused(target_decoder, nullptr, spec); }).find("1 to 16 tokens"), std::string::npos) << error_of([&] { SpeculativeDecoder refused(target_decoder, nullptr, spec); });
  spec = {};
  spec.min_match = 4;
  EXPECT_NE(error_of([&] { SpeculativeDecoder refused(target_decoder, nullptr, spec); }).find("min_match"), std::string::npos) << error_of([&] { SpeculativeDecoder refused(target_decoder, nullptr, spec); });
}

TEST(Speculative, TheDecodeLoopAllocatesNothingOnTheDevice) {
  auto backend = make_backend(BackendKind::cpu);
  auto model = load_model("preset:tiny", *backend, {});
  LlamaOptions q8;
  q8.dtype = DType::q8_0;
  auto draft = load_model("preset:tiny", *backend, q8);
  DecoderOptions options;
  options.n_seqs = 2;
  options.n_ctx = 64;
  options.logits_per_seq = 5;
  Decoder target_decoder(*model, options);
  options.logits_per_seq = 1;
  options.pass_rows = 8;
  Decoder draft_decoder(*draft, options);
  SpeculativeDecoder speculative(target_decoder, &draft_decoder, {});
  GenerateOptions gen;
  gen.n_new = 40;
  gen.stop_at_eos = false;
  speculative.generate({{1, 2}, {1}}, gen);
  const PoolStats before = backend->pool().stats();
  const GenerateResult r = speculative.generate({{1, 2, 3}, {1, 4}}, gen);
  const PoolStats after = backend->pool().stats();
  EXPECT_EQ(after.requests, before.requests) << "speculative generation asked the pool for memory";
  EXPECT_EQ(r.tokens[0].size(), 40u);
  EXPECT_GT(r.draft_passes, 0);
}

// ---- the command line ----

TEST(Speculative, GenerateWithEveryDrafterPrintsThePlainIds) {
  SKIP_WITHOUT_GOLDEN("stories260K.bin");
  const std::string model = golden_path("stories260K.bin");
  auto ids = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"generate", "-m", model, "--prompt-ids", "1,400,56", "-n", "120", "--temp", "0",
                                     "--print-ids", "--batch", "2", "--device", "cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r;
  };
  const CliResult plain = ids({});
  const CliResult self = ids({"--draft", model, "--draft-dtype", "q8_0", "--draft-k", "5"});
  const CliResult lookup = ids({"--draft", "ngram", "--ngram", "2"});
  EXPECT_EQ(self.out, plain.out);
  EXPECT_EQ(lookup.out, plain.out);
  EXPECT_NE(self.err.find("speculative (draft model, k = 5)"), std::string::npos) << self.err;
  EXPECT_NE(lookup.err.find("speculative (prompt lookup, k = 4)"), std::string::npos) << lookup.err;
}

TEST(Speculative, BadDraftOptionsAreRefusedWithOneLine) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"generate", "-m", "preset:tiny", "--draft-k", "3"}, "--draft-k, --draft-dtype and --ngram need --draft"},
      {{"generate", "-m", "preset:tiny", "--draft", "ngram", "--draft-dtype", "q8_0"}, "--draft-dtype needs a draft model"},
      {{"generate", "-m", "preset:tiny", "--draft", "preset:tiny", "--ngram", "2"}, "--ngram goes with --draft ngram"},
      {{"generate", "-m", "preset:tiny", "--draft", "ngram", "--draft-k", "17"}, "--draft-k: 17 is outside [1, 16]"},
      {{"generate", "-m", "preset:tiny", "--draft", "preset:stories15M", "-n", "4"},
       "the draft model's vocabulary has 32000 tokens and the target's 512"},
      {{"bench", "-m", "preset:tiny", "--draft-k", "2"}, "--draft-k and --draft-dtype need --draft"},
      {{"bench", "-m", "preset:tiny", "--draft", "ngram", "-n", "1"}, "give an -n of at least 2"},
  };
  for (const Case& c : cases) {
    CliResult r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 1) << c.message;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    size_t errors = 0;
    for (size_t at = r.err.find("error:"); at != std::string::npos; at = r.err.find("error:", at + 1)) ++errors;
    EXPECT_EQ(errors, 1u) << r.err;
  }
}

TEST(Speculative, BenchTimesPlainAndSpeculativeGeneration) {
  CliResult r = run_cli({"bench", "-m", "preset:tiny", "-p", "0", "-n", "24", "-B", "1,2", "-r", "1", "--device", "cpu",
                         "--draft", "preset:tiny", "--draft-dtype", "q8_0", "--draft-k", "2,4", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json rows = nlohmann::json::parse(r.out);
  // Per batch size: the fixed-id tg24 row, generation without a draft, and one row per k.
  ASSERT_EQ(rows.size(), 8u) << r.out;
  std::map<std::string, int> drafts;
  for (const auto& row : rows) {
    EXPECT_EQ(row["test"], "tg24");
    EXPECT_GT(row["avg_ts"].get<double>(), 0.0);
    const std::string draft = row["draft"];
    ++drafts[draft];
    if (draft.empty() || draft == "none") {
      EXPECT_EQ(row["acceptance"].get<double>(), 0.0);
      continue;
    }
    EXPECT_GE(row["acceptance"].get<double>(), 0.0);
    EXPECT_LE(row["acceptance"].get<double>(), 1.0);
    EXPECT_GE(row["tokens_per_pass"].get<double>(), 1.0);
  }
  EXPECT_EQ(drafts, (std::map<std::string, int>{{"", 2}, {"none", 2}, {"q8_0 model, k=2", 2}, {"q8_0 model, k=4", 2}}));
  CliResult md = run_cli({"bench", "-m", "preset:tiny", "-p", "0", "-n", "16", "-r", "1", "--device", "cpu", "--draft",
                          "ngram", "--draft-k", "3"});
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_NE(md.out.find("tg16 generate, draft ngram, k=3"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("tokens per target pass"), std::string::npos) << md.out;
}

}  // namespace
}  // namespace minfer::test
