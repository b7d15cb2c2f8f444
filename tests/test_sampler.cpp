// The sampler against probabilities computed by hand: run.c's xorshift values, the multinomial
// draw, the top-p cut at and around its boundary, ties, top-p of 1, and the temperature.
// Probabilities here are powers of two, so every sum is exact in float and the boundaries are
// where the arithmetic says they are.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"

namespace minfer {
namespace {

// The first four outputs of run.c's random_u32 from two seeds, computed independently with
// Python's integers: s ^= s >> 12; s ^= s << 25; s ^= s >> 27; (s * 0x2545F4914F6CDD1D) >> 32.
TEST(Sampler, XorshiftMatchesRunC) {
  uint64_t state = 1;
  for (uint32_t expected : {1206177355u, 2882512552u, 3117485455u, 1303648416u}) EXPECT_EQ(random_u32(&state), expected);
  state = 133742;
  for (uint32_t expected : {3033531262u, 2674377904u, 2312864567u, 2287415643u}) EXPECT_EQ(random_u32(&state), expected);
  state = 1;
  EXPECT_FLOAT_EQ(random_f32(&state), 0.28083503246307373f);  // (u32 >> 8) / 2^24
  EXPECT_FLOAT_EQ(random_f32(&state), 0.6711372137069702f);
}

TEST(Sampler, MultinomialTakesTheFirstCdfAboveTheCoin) {
  const std::vector<float> p = {0.5f, 0.25f, 0.125f, 0.125f};  // cdf 0.5, 0.75, 0.875, 1
  EXPECT_EQ(sample_mult(p.data(), 4, 0.0f), 0);
  EXPECT_EQ(sample_mult(p.data(), 4, 0.4999f), 0);
  EXPECT_EQ(sample_mult(p.data(), 4, 0.5f), 1);  // coin < cdf, strictly
  EXPECT_EQ(sample_mult(p.data(), 4, 0.8f), 2);
  EXPECT_EQ(sample_mult(p.data(), 4, 0.99f), 3);
}

// probabilities 1/2, 1/4, 1/8, 1/16, 1/16: cutoff (1 - top_p) / 4 keeps all of them for the
// top_p below; cumulative 0.5, 0.75, 0.875, 0.9375, 1.
TEST(Sampler, TopPCutsAfterTheFirstCumulativeAboveTopP) {
  const std::vector<float> p = {0.0625f, 0.25f, 0.5f, 0.0625f, 0.125f};  // sorted: 2, 1, 4, 0, 3
  std::vector<ProbIndex> scratch(p.size());
  // top_p 0.75: 0.75 is not above 0.75, so the nucleus is {2, 1, 4} with total 0.875. A coin of
  // 0.99 lands at 0.866: inside token 4's share (0.75, 0.875]. Cut one token early, the nucleus
  // would be {2, 1} and the same coin would pick 1.
  EXPECT_EQ(sample_topp(p.data(), 5, 0.75f, 0.99f, scratch.data()), 4);
  EXPECT_EQ(sample_topp(p.data(), 5, 0.75f, 0.5f, scratch.data()), 2);    // r = 0.4375 < 0.5
  EXPECT_EQ(sample_topp(p.data(), 5, 0.75f, 0.6f, scratch.data()), 1);    // r = 0.525 in (0.5, 0.75]
  // top_p just below 0.75: 0.75 is above it, the nucleus is {2, 1} (total 0.75).
  EXPECT_EQ(sample_topp(p.data(), 5, 0.7499f, 0.99f, scratch.data()), 1);
  // top_p 0.875 exactly: the nucleus grows to {2, 1, 4, 0} (total 0.9375); coin 0.99 -> r = 0.928.
  EXPECT_EQ(sample_topp(p.data(), 5, 0.875f, 0.99f, scratch.data()), 0);
  // top_p 0.5: {2} alone is not above 0.5, so {2, 1}.
  EXPECT_EQ(sample_topp(p.data(), 5, 0.5f, 0.9f, scratch.data()), 1);
}

TEST(Sampler, TopPCutoffDropsUnlikelyTokensBeforeSorting) {
  // top_p 0.5 over 5 tokens: cutoff (1 - 0.5) / 4 = 0.125; the two 1/16 tokens are dropped, which
  // changes nothing about the nucleus, only the work.
  const std::vector<float> p = {0.0625f, 0.25f, 0.5f, 0.0625f, 0.125f};
  std::vector<ProbIndex> scratch(p.size(), ProbIndex{-1.0f, -1});
  sample_topp(p.data(), 5, 0.5f, 0.1f, scratch.data());
  EXPECT_EQ(scratch[3].index, -1) << "only three candidates were written";
  EXPECT_EQ(scratch[2].index, 4);
}

TEST(Sampler, TiesKeepIndexOrder) {
  const std::vector<float> p = {0.25f, 0.25f, 0.25f, 0.25f};
  std::vector<ProbIndex> scratch(p.size());
  // Sorted as 0, 1, 2, 3 (a stable sort, like run.c's qsort); top_p 0.5: cumulative 0.5 is not
  // above it, 0.75 is: nucleus {0, 1, 2}, total 0.75.
  EXPECT_EQ(sample_topp(p.data(), 4, 0.5f, 0.0f, scratch.data()), 0);
  EXPECT_EQ(sample_topp(p.data(), 4, 0.5f, 0.5f, scratch.data()), 1);   // r = 0.375
  EXPECT_EQ(sample_topp(p.data(), 4, 0.5f, 0.99f, scratch.data()), 2);  // r = 0.7425
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(sample_argmax(logits.data(), 4), 1) << "the first of equal maxima";
}

// Many ties: std::sort (an introsort past 16 elements) reorders equal keys, so only the index
// tie-break keeps run.c's order. 64 equal tokens at top_p 0.5: the nucleus is tokens 0..32
// (33/64 > 0.5), and coin c picks token floor(33 c).
TEST(Sampler, ManyTiesKeepIndexOrder) {
  std::vector<float> p(64, 1.0f / 64);
  std::vector<ProbIndex> scratch(p.size());
  for (float coin : {0.0f, 0.1f, 0.37f, 0.5f, 0.8f, 0.99f})
    EXPECT_EQ(sample_topp(p.data(), 64, 0.5f, coin, scratch.data()), static_cast<int32_t>(coin * 33)) << coin;
  // 48 ties, with 16 larger tokens spread among them, which come first.
  std::vector<float> q(64, 0.5f / 48);
  for (int i = 0; i < 64; i += 4) q[static_cast<size_t>(i)] = 0.5f / 16;
  std::vector<int32_t> order;  // run.c's: the larger ones by index, then the ties by index
  for (int i = 0; i < 64; i += 4) order.push_back(i);
  for (int i = 0; i < 64; ++i)
    if (i % 4 != 0) order.push_back(i);
  // top_p 0.99: every token (the cumulative passes 0.99 only at the last); coin c lands on the
  // token whose cumulative share first exceeds c.
  for (int k = 0; k < 64; ++k) {
    const float share = k < 16 ? (k + 0.5f) * (0.5f / 16) : 0.5f + (k - 16 + 0.5f) * (0.5f / 48);
    EXPECT_EQ(sample_topp(q.data(), 64, 0.99f, share, scratch.data()), order[static_cast<size_t>(k)]) << k;
  }
}

// With top_p 1 (or 0) the sampler draws from the whole distribution: the first coin of seed 1
// (0.2808...) falls in token 0's share of {1/2, 1/4, 1/8, 1/8}, the second (0.6711...) in token 1's.
TEST(Sampler, TopPOfOneSamplesTheWholeDistribution) {
  for (float top_p : {1.0f, 0.0f}) {
    Sampler sampler(4, 1.0f, top_p, 1);
    std::vector<float> logits = {std::log(0.5f), std::log(0.25f), std::log(0.125f), std::log(0.125f)};
    std::vector<float> again = logits;
    EXPECT_EQ(sampler.sample(logits.data()), 0) << "top_p " << top_p;
    EXPECT_EQ(sampler.sample(again.data()), 1) << "top_p " << top_p;
  }
}

TEST(Sampler, TemperatureDividesTheLogitsBeforeTheSoftmax) {
  Sampler sampler(3, 2.0f, 1.0f, 1);
  std::vector<float> logits = {1.0f, 2.0f, 4.0f};
  sampler.sample(logits.data());  // leaves the probabilities behind, as run.c does
  const double e0 = std::exp(0.5), e1 = std::exp(1.0), e2 = std::exp(2.0), total = e0 + e1 + e2;
  EXPECT_NEAR(logits[0], e0 / total, 1e-6);
  EXPECT_NEAR(logits[1], e1 / total, 1e-6);
  EXPECT_NEAR(logits[2], e2 / total, 1e-6);
  // Temperature 0 is greedy and leaves the logits alone.
  Sampler greedy(3, 0.0f, 0.9f, 1);
  std::vector<float> raw = {1.0f, 5.0f, 4.0f};
  EXPECT_EQ(greedy.sample(raw.data()), 1);
  EXPECT_EQ(raw[1], 5.0f);
}

// The same with nucleus sampling: the probabilities the cut is made from are softmax(logits / T),
// whatever top-p is.
TEST(Sampler, TemperatureAppliesBeforeTheTopPCut) {
  for (float top_p : {0.5f, 0.9f, 0.99f}) {
    Sampler sampler(3, 0.5f, top_p, 1);
    std::vector<float> logits = {1.0f, 2.0f, 1.5f};
    sampler.sample(logits.data());
    const double e0 = std::exp(2.0), e1 = std::exp(4.0), e2 = std::exp(3.0), total = e0 + e1 + e2;
    EXPECT_NEAR(logits[0], e0 / total, 1e-6) << "top_p " << top_p;
    EXPECT_NEAR(logits[1], e1 / total, 1e-6) << "top_p " << top_p;
    EXPECT_NEAR(logits[2], e2 / total, 1e-6) << "top_p " << top_p;
  }
}

// The top-p boundary through the Sampler the engine runs (softmax, seeded coins, the cut), not
// sample_topp() alone: four equal logits give probabilities of exactly 1/4 (cumulative 0.25, 0.5,
// 0.75, 1). A top_p equal to a cumulative sum keeps the next token too (the sum must pass it);
// a top_p just below it does not. top_p 0.25 also puts every token exactly at run.c's cutoff
// (1 - 0.25) / 3 = 1/4, where it stays a candidate. Over 400 seeded draws each kept token appears
// (in more than 400 / (kept + 1) of them) and no other; distribution() writes the same nucleus,
// renormalized.
TEST(Sampler, TopPAtACumulativeSumKeepsTheNextTokenThroughTheSampler) {
  struct Case {
    float top_p;
    int kept;  // tokens 0 .. kept - 1
  };
  for (const Case& c : {Case{0.5f, 3}, Case{0.4999f, 2}, Case{0.75f, 4}, Case{0.7499f, 3}, Case{0.25f, 2}}) {
    Sampler sampler(4, 1.0f, c.top_p, 7);
    std::vector<int> seen(4, 0);
    for (int draw = 0; draw < 400; ++draw) {
      std::vector<float> logits(4, 0.0f);
      ++seen[static_cast<size_t>(sampler.sample(logits.data()))];
    }
    for (int t = 0; t < 4; ++t) {
      const int least = t < c.kept ? 400 / (c.kept + 1) + 1 : 0, most = t < c.kept ? 400 : 0;
      EXPECT_GE(seen[static_cast<size_t>(t)], least) << "top_p " << c.top_p << ", token " << t;
      EXPECT_LE(seen[static_cast<size_t>(t)], most) << "top_p " << c.top_p << ", token " << t;
    }
    std::vector<float> distribution(4, 0.0f);
    sampler.distribution(distribution.data());
    for (int t = 0; t < 4; ++t)
      EXPECT_FLOAT_EQ(distribution[static_cast<size_t>(t)], t < c.kept ? 1.0f / float(c.kept) : 0.0f)
          << "top_p " << c.top_p << ", token " << t;
  }
}

// A sampler restarted with other settings samples as a new one made with them.
TEST(Sampler, RestartIsANewSampler) {
  Sampler reused(5, 0.0f, 1.0f, 3);
  std::vector<float> logits = {0.1f, 0.4f, 0.2f, 0.9f, 0.3f};
  std::vector<float> scratch = logits;
  reused.sample(scratch.data());
  reused.restart(0.7f, 0.8f, 42);
  Sampler fresh(5, 0.7f, 0.8f, 42);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> a = logits, b = logits;
    EXPECT_EQ(reused.sample(a.data()), fresh.sample(b.data())) << "draw " << i;
  }
  EXPECT_THROW(reused.restart(-1.0f, 0.9f, 1), Error);
}

TEST(Sampler, ImpossibleSettingsAreRefused) {
  EXPECT_THROW(Sampler(10, -1.0f, 0.9f, 1), Error);
  EXPECT_THROW(Sampler(10, 1.0f, 1.5f, 1), Error);
  EXPECT_THROW(Sampler(10, 1.0f, 0.9f, 0), Error);
  EXPECT_THROW(Sampler(0, 1.0f, 0.9f, 1), Error);
}

// The share of each token in 400 draws from `logits` (copied for each draw).
std::vector<int> draws(Sampler& sampler, const std::vector<float>& logits) {
  std::vector<int> seen(logits.size(), 0);
  for (int draw = 0; draw < 400; ++draw) {
    std::vector<float> z = logits;
    ++seen[static_cast<size_t>(sampler.sample(z.data()))];
  }
  return seen;
}

SamplingOptions with_top_k(int64_t k) {
  SamplingOptions o;
  o.top_k = k;
  return o;
}

// Settings that ask for nothing beyond run.c (top_k 0, min_p 0, no penalty or bias) draw run.c's
// tokens: the same as a sampler made without them.
TEST(Sampler, DefaultOptionsDrawAsRunC) {
  Sampler plain(5, 0.9f, 0.7f, 11), with_defaults(5, 0.0f, 1.0f, 3);
  with_defaults.restart(0.9f, 0.7f, 11, SamplingOptions{});
  const std::vector<float> logits = {0.1f, 0.4f, 0.2f, 0.9f, 0.3f};
  for (int i = 0; i < 100; ++i) {
    std::vector<float> a = logits, b = logits;
    EXPECT_EQ(plain.sample(a.data()), with_defaults.sample(b.data())) << "draw " << i;
  }
}

// top_k keeps the k most likely tokens, ties by index: four equal logits and a smaller one. k = 2
// keeps tokens 0 and 1 of the equal four; k = 4 all four but not token 4; k past the vocabulary
// everything. distribution() writes the kept ones renormalized.
TEST(Sampler, TopKKeepsTheKMostLikelyTiesByIndex) {
  const std::vector<float> logits = {0.0f, 0.0f, 0.0f, 0.0f, -1.0f};
  for (int64_t k : {1, 2, 4, 5, 6}) {
    Sampler sampler(5, 1.0f, 1.0f, 7);
    sampler.restart(1.0f, 1.0f, 7, with_top_k(k));
    const std::vector<int> seen = draws(sampler, logits);
    const int64_t kept = std::min<int64_t>(k, 5);
    for (int64_t t = 0; t < 5; ++t) {
      if (t < kept) EXPECT_GT(seen[size_t(t)], 0) << "k " << k << ", token " << t;
      else EXPECT_EQ(seen[size_t(t)], 0) << "k " << k << ", token " << t;
    }
    if (k > 4) continue;
    std::vector<float> d(5, 0.0f);
    sampler.distribution(d.data());
    for (int64_t t = 0; t < 5; ++t) EXPECT_FLOAT_EQ(d[size_t(t)], t < k ? 1.0f / float(k) : 0.0f) << k << " " << t;
  }
}

// top-p after top_k is taken over the kept tokens renormalized: four equal logits, top_k 2 leaves
// two of 1/2 each; top_p 0.5 keeps both (0.5 is not above it), 0.4999 only the first. Over the
// whole distribution (cumulative 0.25, 0.5) top_p 0.4999 would keep two.
TEST(Sampler, TopPAfterTopKIsOverTheKeptTokens) {
  const std::vector<float> logits(4, 0.0f);
  for (float top_p : {0.5f, 0.4999f}) {
    Sampler sampler(4, 1.0f, 1.0f, 7);
    sampler.restart(1.0f, top_p, 7, with_top_k(2));
    std::vector<float> d = logits;
    sampler.distribution(d.data());
    const int kept = top_p == 0.5f ? 2 : 1;
    for (int t = 0; t < 4; ++t) EXPECT_FLOAT_EQ(d[size_t(t)], t < kept ? 1.0f / float(kept) : 0.0f) << top_p << " " << t;
  }
}

// min_p keeps the tokens at least min_p times as likely as the most likely: logits 0, 0, -1 give
// ratios 1, 1, 1/e = 0.3679. min_p 0.36 keeps all three, 0.37 the two; min_p 1 keeps the two
// equal ones (a ratio of exactly min_p is kept).
TEST(Sampler, MinPKeepsTokensAtLeastMinPTimesTheMostLikely) {
  const std::vector<float> logits = {0.0f, -1.0f, 0.0f};
  struct Case {
    float min_p;
    bool keeps_1;
  };
  for (const Case& c : {Case{0.36f, true}, Case{0.37f, false}, Case{1.0f, false}}) {
    SamplingOptions o;
    o.min_p = c.min_p;
    Sampler sampler(3, 1.0f, 1.0f, 5);
    sampler.restart(1.0f, 1.0f, 5, o);
    const std::vector<int> seen = draws(sampler, logits);
    EXPECT_GT(seen[0], 0) << c.min_p;
    EXPECT_GT(seen[2], 0) << c.min_p;
    if (c.keeps_1) EXPECT_GT(seen[1], 0) << c.min_p;
    else EXPECT_EQ(seen[1], 0) << c.min_p;
  }
}

// The penalties, through process(): presence and frequency count generated tokens only (token 3
// is in the prompt and keeps its logit); repetition divides a positive logit and multiplies a
// negative one of a token in the prompt or generated; logit_bias adds.
TEST(Sampler, PenaltiesAndBiasChangeTheLogitsAsDocumented) {
  SamplingOptions o;
  o.presence_penalty = 0.5f;
  o.frequency_penalty = 0.25f;
  Sampler sampler(5, 1.0f, 1.0f, 1);
  sampler.restart(1.0f, 1.0f, 1, o);
  const int32_t prompt[] = {3};
  sampler.begin(prompt, 1);
  sampler.count(1);
  sampler.count(1);
  sampler.count(2);
  std::vector<float> z = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  sampler.process(z.data());
  EXPECT_EQ(z, (std::vector<float>{1.0f, 0.0f, 0.25f, 1.0f, 1.0f}));
  sampler.begin(prompt, 1);  // a new sequence forgets the counts
  z.assign(5, 1.0f);
  sampler.process(z.data());
  EXPECT_EQ(z, std::vector<float>(5, 1.0f));

  SamplingOptions r;
  r.repetition_penalty = 2.0f;
  r.logit_bias = {{4, 5.0f}, {0, -100.0f}};
  sampler.restart(1.0f, 1.0f, 1, r);
  const int32_t prompt_r[] = {0, 1};
  sampler.begin(prompt_r, 2);
  sampler.count(2);
  z = {2.0f, -2.0f, 2.0f, -2.0f, 1.0f};
  sampler.process(z.data());
  EXPECT_EQ(z, (std::vector<float>{1.0f - 100.0f, -4.0f, 1.0f, -2.0f, 6.0f}));
}

// A greedy sampler takes the arg-max of the processed logits, and sample() counts what it picks:
// with a frequency penalty of 2, token 0 (logit 1 above token 1) is picked once, then token 1.
TEST(Sampler, GreedySampleTakesTheProcessedArgMaxAndCounts) {
  SamplingOptions o;
  o.frequency_penalty = 2.0f;
  Sampler sampler(3, 0.0f, 1.0f, 1);
  sampler.restart(0.0f, 1.0f, 1, o);
  std::vector<float> z = {1.0f, 0.0f, -5.0f};
  EXPECT_EQ(sampler.sample(z.data()), 0);
  z = {1.0f, 0.0f, -5.0f};
  EXPECT_EQ(sampler.sample(z.data()), 1);
  SamplingOptions bias;
  bias.logit_bias = {{2, 10.0f}};
  sampler.restart(0.0f, 1.0f, 1, bias);
  z = {1.0f, 0.0f, -5.0f};
  EXPECT_EQ(sampler.sample(z.data()), 2);
}

// Each setting at its limit is taken, one past it refused; so are 300 bias entries and 301.
TEST(Sampler, OptionsAtTheirLimitsAndPast) {
  Sampler sampler(10, 1.0f, 1.0f, 1);
  auto refused = [&](SamplingOptions o) {
    EXPECT_THROW(sampler.restart(1.0f, 1.0f, 1, o), Error);
    EXPECT_THROW(check_sampling_options(o, 10), Error);
  };
  SamplingOptions o;
  o.top_k = 0;
  o.min_p = 1.0f;
  o.repetition_penalty = 1e-30f;
  o.logit_bias = {{9, -1e30f}, {0, 1.0f}};
  EXPECT_NO_THROW(sampler.restart(1.0f, 1.0f, 1, o));
  o = {};
  o.top_k = -1;
  refused(o);
  o = {};
  o.min_p = 1.0001f;
  refused(o);
  o = {};
  o.repetition_penalty = 0.0f;
  refused(o);
  o = {};
  o.presence_penalty = INFINITY;
  refused(o);
  o = {};
  o.logit_bias = {{10, 1.0f}};
  refused(o);
  o.logit_bias = {{-1, 1.0f}};
  refused(o);
  o.logit_bias.assign(SamplingOptions::kMaxLogitBias, LogitBias{1, 1.0f});
  EXPECT_NO_THROW(check_sampling_options(o, 10));
  o.logit_bias.push_back({1, 1.0f});
  refused(o);
}

}  // namespace
}  // namespace minfer
