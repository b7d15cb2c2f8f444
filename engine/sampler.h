// Token sampling, identical to llama2.c's run.c: greedy at temperature 0; otherwise logits are
// divided by the temperature, turned into probabilities by softmax, and sampled by a coin from
// run.c's xorshift generator: from the whole distribution when top_p is 0 or 1, else from the
// smallest set of most likely tokens whose probabilities sum past top_p (nucleus sampling), with
// run.c's cutoff (1 - top_p) / (n - 1) for candidates and its ordering by descending probability.
// Given the same logits and seed, the same tokens as run.c come out.
#pragma once

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
// nucleus sampling: candidates at or above (1 - top_p) / (n - 1), sorted by descending probability
// (ties by index), cut after the first whose cumulative probability exceeds top_p; then the
// coin, scaled by the nucleus's total, picks among them. `scratch` holds n entries.
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

 private:
  int64_t vocab_size_;
  float temperature_, top_p_;
  uint64_t state_;
  std::vector<ProbIndex> candidates_;  // sized once: nothing is allocated while sampling
};

}  // namespace minfer
