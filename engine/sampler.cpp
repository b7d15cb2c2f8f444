#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace minfer {

uint32_t random_u32(uint64_t* state) {
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return static_cast<uint32_t>((*state * 0x2545F4914F6CDD1Dull) >> 32);
}

float random_f32(uint64_t* state) { return static_cast<float>(random_u32(state) >> 8) / 16777216.0f; }

void softmax_in_place(float* x, int64_t n) {
  float max_value = x[0];
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > max_value) max_value = x[i];
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_value);
    sum += x[i];
  }
  for (int64_t i = 0; i < n; ++i) x[i] /= sum;
}

Sampler::Sampler(int64_t vocab_size, float temperature, float top_p, uint64_t seed) : vocab_size_(vocab_size) {
  MINFER_CHECK(vocab_size > 0, "sampler: vocab_size must be positive");
  restart(temperature, top_p, seed);
  candidates_.resize(static_cast<size_t>(vocab_size));
}

void Sampler::restart(float temperature, float top_p, uint64_t seed) {
  MINFER_CHECK(temperature >= 0.0f && std::isfinite(temperature), "temperature ", temperature,
               " must be a finite number >= 0");
  MINFER_CHECK(top_p >= 0.0f && top_p <= 1.0f, "top-p ", top_p, " must be in [0, 1]");
  MINFER_CHECK(seed != 0, "the seed must not be 0 (xorshift would stay at 0)");
  temperature_ = temperature;
  top_p_ = top_p;
  state_ = seed;
}

int32_t sample_argmax(const float* values, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (values[i] > values[best]) best = i;
  return static_cast<int32_t>(best);
}

int32_t sample_mult(const float* probabilities, int64_t n, float coin) {
  float cdf = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    cdf += probabilities[i];
    if (coin < cdf) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(n - 1);  // in case of rounding errors
}

size_t nucleus(const float* probabilities, int64_t n, float top_p, ProbIndex* scratch, float* total) {
  // Tokens below the cutoff cannot be part of the nucleus: leave them out before sorting.
  const float cutoff = (1.0f - top_p) / static_cast<float>(n - 1);
  size_t count = 0;
  for (int64_t i = 0; i < n; ++i)
    if (probabilities[i] >= cutoff) scratch[count++] = {probabilities[i], static_cast<int32_t>(i)};
  *total = 0.0f;
  if (count == 0) return 0;  // a tiny top_p over a tiny vocabulary
  // run.c sorts with glibc's qsort, a merge sort: stable, so equal probabilities keep index
  // order. Breaking ties by index gives that order without the merge sort's buffer.
  std::sort(scratch, scratch + count, [](const ProbIndex& a, const ProbIndex& b) {
    return a.prob > b.prob || (a.prob == b.prob && a.index < b.index);
  });
  float cumulative = 0.0f;
  for (size_t i = 0; i < count; ++i) {
    cumulative += scratch[i].prob;
    if (cumulative > top_p) {
      *total = cumulative;
      return i + 1;
    }
  }
  *total = cumulative;
  return count;
}

int32_t sample_topp(const float* probabilities, int64_t n, float top_p, float coin, ProbIndex* scratch) {
  float cumulative = 0.0f;
  const size_t count = nucleus(probabilities, n, top_p, scratch, &cumulative);
  if (count == 0) return sample_argmax(probabilities, n);
  const float r = coin * cumulative;
  float cdf = 0.0f;
  for (size_t i = 0; i < count; ++i) {
    cdf += scratch[i].prob;
    if (r < cdf) return scratch[i].index;
  }
  return scratch[count - 1].index;
}

int32_t Sampler::sample(float* logits) {
  if (temperature_ == 0.0f) return sample_argmax(logits, vocab_size_);
  // A temperature so small that the largest logit divided by it overflows float has no
  // distribution in float (softmax would give NaN): its limit as T -> 0, the greedy choice, is
  // returned, and nothing else changes for ordinary temperatures.
  const int32_t best = sample_argmax(logits, vocab_size_);
  if (!std::isfinite(logits[best] / temperature_)) return best;
  for (int64_t i = 0; i < vocab_size_; ++i) logits[i] /= temperature_;
  softmax_in_place(logits, vocab_size_);
  const float coin = random_f32(&state_);
  if (top_p_ <= 0.0f || top_p_ >= 1.0f) return sample_mult(logits, vocab_size_, coin);
  return sample_topp(logits, vocab_size_, top_p_, coin, candidates_.data());
}

void Sampler::distribution(float* logits) {
  MINFER_CHECK(temperature_ > 0.0f, "a greedy sampler has no distribution to write");
  const int32_t best = sample_argmax(logits, vocab_size_);
  if (!std::isfinite(logits[best] / temperature_)) {  // the greedy limit, as sample() takes it
    std::fill(logits, logits + vocab_size_, 0.0f);
    logits[best] = 1.0f;
    return;
  }
  for (int64_t i = 0; i < vocab_size_; ++i) logits[i] /= temperature_;
  softmax_in_place(logits, vocab_size_);
  if (top_p_ <= 0.0f || top_p_ >= 1.0f) return;
  // The nucleus exactly as sample_topp() cuts it; its probabilities over their sum.
  float total = 0.0f;
  const size_t count = nucleus(logits, vocab_size_, top_p_, candidates_.data(), &total);
  std::fill(logits, logits + vocab_size_, 0.0f);
  if (count == 0) {
    logits[best] = 1.0f;
    return;
  }
  for (size_t i = 0; i < count; ++i) logits[candidates_[i].index] = candidates_[i].prob / total;
}

}  // namespace minfer
