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

class Sampler {
 public:
  Sampler(int64_t vocab_size, float temperature, float top_p, uint64_t seed);
  bool greedy() const { return temperature_ == 0.0f; }
  // Picks the next token from vocab_size logits; like run.c, it overwrites them with
  // probabilities when sampling.
  int32_t sample(float* logits);

 private:
  struct ProbIndex {
    float prob;
    int32_t index;
  };
  int32_t sample_top_p(const float* probabilities, float coin);
  int32_t argmax(const float* values) const;  // run.c's sample_argmax: the first maximum

  int64_t vocab_size_;
  float temperature_, top_p_;
  uint64_t state_;
  std::vector<ProbIndex> candidates_;  // sized once: nothing is allocated while sampling
};

// run.c's softmax, in float, in place.
void softmax_in_place(float* x, int64_t n);

}  // namespace minfer
