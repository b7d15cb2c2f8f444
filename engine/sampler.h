// Token sampling, identical to llama2.c's run.c: greedy at temperature 0; otherwise logits are
// divided by the temperature, turned into probabilities by softmax, and sampled by a coin from
// run.c's xorshift generator: from the whole distribution when top_p is 0 or 1, else from the
// smallest set of most likely tokens whose probabilities sum past top_p (nucleus sampling), with
// run.c's cutoff (1 - top_p) / (n - 1) for candidates and its ordering by descending probability.
// Given the same logits and seed, the same tokens as run.c come out.
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

class Sampler {
 public:
  Sampler(int64_t vocab_size, float temperature, float top_p, uint64_t seed);
  // The same sampler with other settings, as if made anew, without allocating (a scheduler's
  // slot takes each new request's settings this way).
  void restart(float temperature, float top_p, uint64_t seed);
  bool greedy() const { return temperature_ == 0.0f; }
  // Picks the next token from vocab_size logits; like run.c, it overwrites them with
  // probabilities when sampling. A temperature so small that logits / temperature overflows
  // float samples greedily (the limit of the distribution as the temperature goes to 0).
  int32_t sample(float* logits);
  // The distribution sample() draws from, written over the logits (which it needs as sample()
  // does): the temperature's softmax, and with top-p only the nucleus, renormalised to sum to 1.
  // Not for a greedy sampler, whose distribution is a point. Speculative decoding compares the
  // target's and the drafter's distributions this way (engine/speculative.h).
  void distribution(float* logits);
  // The generator's state: restart(temperature, top_p, state()) resumes its sequence of draws (a
  // preempted request's, engine/scheduler.h).
  uint64_t state() const { return state_; }
  // A coin from this sampler's generator, as sample() draws them.
  float coin() { return random_f32(&state_); }

 private:
  int64_t vocab_size_;
  float temperature_, top_p_;
  uint64_t state_;
  std::vector<ProbIndex> candidates_;  // sized once: nothing is allocated while sampling
};

}  // namespace minfer
