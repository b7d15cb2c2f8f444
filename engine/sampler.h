// Token sampling, identical to llama2.c's run.c: greedy at temperature 0; otherwise logits are
// divided by the temperature, turned into probabilities by softmax, and sampled by a coin from
// run.c's xorshift generator: from the whole distribution when top_p is 0 or 1, else from the
// smallest set of most likely tokens whose probabilities sum past top_p (nucleus sampling), with
// run.c's cutoff (1 - top_p) / (n - 1) for candidates and its ordering by descending probability.
// Given the same logits and seed, the same tokens as run.c come out.
//
// Beyond run.c (SamplingOptions; each off by default, and then nothing above changes): before
// anything else the logits are processed, in this order, by
//   - repetition_penalty r (llama.cpp's and vLLM's multiplicative one, with vLLM's reach: every token
//     of the prompt and of what was generated): a positive logit is divided by r, a negative one
//     multiplied by r;
//   - presence_penalty and frequency_penalty (OpenAI's): logit -= presence * (count > 0) +
//     frequency * count, where count is how often the token was generated (the prompt does not count);
//   - logit_bias: a bias added to the logit of each token named;
// then the temperature's softmax, and the candidates are cut by top_k (the k most likely, ties by
// index), then top_p over the kept ones renormalized, then min_p (those at least min_p times as
// likely as the most likely). A greedy sampler takes the arg-max of the processed logits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace minfer {

// run.c's xorshift64* generator.
uint32_t random_u32(uint64_t* state);
float random_f32(uint64_t* state);  // in [0, 1)

// run.c's softmax, in float, in place.
void softmax_in_place(float* x, int64_t n);

// The three ways run.c picks a token, each a function of the probabilities and a coin in [0, 1):
// the first index of the largest value (ties go to the lower index, as in run.c)
int32_t sample_argmax(const float* values, int64_t n);
// the first index whose cumulative probability exceeds the coin (the last index if none does)
int32_t sample_mult(const float* probabilities, int64_t n, float coin);
struct ProbIndex {
  float prob;
  int32_t index;
};
// The nucleus: candidates at or above run.c's cutoff (1 - top_p) / (n - 1), sorted into `scratch`
// by descending probability (ties by index) and cut after the first whose cumulative probability
// exceeds top_p. Returns how many (0 when none passes the cutoff); *total is their sum.
size_t nucleus(const float* probabilities, int64_t n, float top_p, ProbIndex* scratch, float* total);
// nucleus sampling: the coin, scaled by the nucleus's total, picks among the nucleus in its
// sorted order (the argmax when the nucleus is empty). `scratch` holds n entries.
int32_t sample_topp(const float* probabilities, int64_t n, float top_p, float coin, ProbIndex* scratch);

struct LogitBias {
  int32_t token;
  float bias;
};

// The sampler's settings beyond run.c's temperature and top-p (see the top of this file).
struct SamplingOptions {
  static constexpr size_t kMaxLogitBias = 300;  // entries of logit_bias at most
  int64_t top_k = 0;                 // >= 0; 0 (or the vocabulary's size or more): every token
  float min_p = 0.0f;                // in [0, 1]; 0: no cut
  float presence_penalty = 0.0f;     // finite; 0: none
  float frequency_penalty = 0.0f;    // finite; 0: none
  float repetition_penalty = 1.0f;   // > 0 and finite; 1: none
  std::vector<LogitBias> logit_bias;  // tokens inside the vocabulary, finite biases
  bool penalizes() const { return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f; }
  // Whether the logits are changed before the choice (and a device's arg-max of them is not the greedy token).
  bool processes_logits() const { return penalizes() || !logit_bias.empty(); }
  bool cuts() const { return top_k > 0 || min_p > 0.0f; }  // the cuts past run.c's top-p
};
// Throws Error naming the first setting outside the ranges above (a bias token outside [0, vocab_size)).
void check_sampling_options(const SamplingOptions& options, int64_t vocab_size);

class Sampler {
 public:
  Sampler(int64_t vocab_size, float temperature, float top_p, uint64_t seed);
  // The same sampler with other settings, as if made anew (options back to their defaults), without
  // allocating (a scheduler's slot takes each new request's settings this way).
  void restart(float temperature, float top_p, uint64_t seed);
  // With SamplingOptions too, also without allocating (the counts and the bias list are sized by
  // the constructor for any options check_sampling_options accepts).
  void restart(float temperature, float top_p, uint64_t seed, const SamplingOptions& options);
  bool greedy() const { return temperature_ == 0.0f; }
  const SamplingOptions& options() const { return options_; }
  // A new sequence after prompt[n]: forgets what was generated, and remembers the prompt's tokens for
  // repetition_penalty. A no-op without penalties. restart() begins with no prompt.
  void begin(const int32_t* prompt, int64_t n);
  // Picks the next token from vocab_size logits: process(), choose(), count(). Like run.c, it
  // overwrites them with probabilities when sampling.
  int32_t sample(float* logits);
  // The penalties and the bias, applied to the logits in place (nothing without them).
  void process(float* logits) const;
  // The token from processed logits: their arg-max when greedy, else a draw with the temperature and
  // the cuts. A temperature so small that logits / temperature overflows float samples greedily (the
  // limit of the distribution as the temperature goes to 0).
  int32_t choose(float* logits);
  // Counts a token as generated, for the penalties (a no-op without them).
  void count(int32_t token);
  // The distribution sample() draws from, written over the logits (which it needs as sample()
  // does): the temperature's softmax, and with top-p (top_k, min_p) only the tokens kept,
  // renormalised to sum to 1. It does not process() them.
  // Not for a greedy sampler, whose distribution is a point. Speculative decoding compares the
  // target's and the drafter's distributions this way (engine/speculative.h).
  void distribution(float* logits);
  // The generator's state: restart(temperature, top_p, state(), ...) resumes its sequence of draws (a
  // preempted request's, engine/scheduler.h).
  uint64_t state() const { return state_; }
  // A coin from this sampler's generator, as sample() draws them.
  float coin() { return random_f32(&state_); }

 private:
  size_t cut(float* probabilities, float* total);

  int64_t vocab_size_;
  float temperature_, top_p_;
  uint64_t state_;
  SamplingOptions options_;
  std::vector<ProbIndex> candidates_;  // sized once: nothing is allocated while sampling
  // For the penalties: how often each token was generated, and whether it is in the prompt.
  std::vector<int32_t> generated_;
  std::vector<uint8_t> in_prompt_;
};

}  // namespace minfer
