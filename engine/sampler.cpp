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
  // Sized once for every option a request may bring (5 bytes a vocabulary token and 300 biases),
  // so that no restart() allocates: a scheduler restarts a slot's sampler inside a step.
  generated_.resize(static_cast<size_t>(vocab_size));
  in_prompt_.resize(static_cast<size_t>(vocab_size));
  options_.logit_bias.reserve(SamplingOptions::kMaxLogitBias);
}

void Sampler::restart(float temperature, float top_p, uint64_t seed) {
  MINFER_CHECK(temperature >= 0.0f && std::isfinite(temperature), "temperature ", temperature,
               " must be a finite number >= 0");
  MINFER_CHECK(top_p >= 0.0f && top_p <= 1.0f, "top-p ", top_p, " must be in [0, 1]");
  MINFER_CHECK(seed != 0, "the seed must not be 0 (xorshift would stay at 0)");
  temperature_ = temperature;
  top_p_ = top_p;
  state_ = seed;
  // The defaults, field by field: the bias's capacity is kept for the next request that has one.
  options_.top_k = 0;
  options_.min_p = 0.0f;
  options_.presence_penalty = options_.frequency_penalty = 0.0f;
  options_.repetition_penalty = 1.0f;
  options_.logit_bias.clear();
}

void check_sampling_options(const SamplingOptions& o, int64_t vocab_size) {
  MINFER_CHECK(o.top_k >= 0, "top-k ", o.top_k, " must be >= 0");
  MINFER_CHECK(o.min_p >= 0.0f && o.min_p <= 1.0f, "min-p ", o.min_p, " must be in [0, 1]");
  MINFER_CHECK(std::isfinite(o.presence_penalty) && std::isfinite(o.frequency_penalty),
               "the presence and frequency penalties must be finite");
  MINFER_CHECK(o.repetition_penalty > 0.0f && std::isfinite(o.repetition_penalty), "repetition penalty ",
               o.repetition_penalty, " must be a finite number > 0");
  MINFER_CHECK(o.logit_bias.size() <= SamplingOptions::kMaxLogitBias, "logit bias: ", o.logit_bias.size(),
               " entries, at most ", SamplingOptions::kMaxLogitBias);
  for (const LogitBias& b : o.logit_bias) {
    MINFER_CHECK(b.token >= 0 && b.token < vocab_size, "logit bias: token ", b.token,
                 " is outside the vocabulary [0, ", vocab_size, ")");
    MINFER_CHECK(std::isfinite(b.bias), "logit bias of token ", b.token, " must be finite");
  }
}

void Sampler::restart(float temperature, float top_p, uint64_t seed, const SamplingOptions& options) {
  check_sampling_options(options, vocab_size_);
  restart(temperature, top_p, seed);
  options_.top_k = options.top_k;
  options_.min_p = options.min_p;
  options_.presence_penalty = options.presence_penalty;
  options_.frequency_penalty = options.frequency_penalty;
  options_.repetition_penalty = options.repetition_penalty;
  options_.logit_bias.assign(options.logit_bias.begin(), options.logit_bias.end());
  begin(nullptr, 0);
}

void Sampler::begin(const int32_t* prompt, int64_t n) {
  if (!options_.penalizes()) return;
  std::fill(generated_.begin(), generated_.end(), 0);
  std::fill(in_prompt_.begin(), in_prompt_.end(), uint8_t(0));
  for (int64_t i = 0; i < n; ++i)
    if (prompt[i] >= 0 && prompt[i] < vocab_size_) in_prompt_[static_cast<size_t>(prompt[i])] = 1;
}

void Sampler::count(int32_t token) {
  if (options_.penalizes() && token >= 0 && token < vocab_size_) ++generated_[static_cast<size_t>(token)];
}

void Sampler::process(float* logits) const {
  const SamplingOptions& o = options_;
  if (o.penalizes()) {
    for (int64_t i = 0; i < vocab_size_; ++i) {
      const int32_t n = generated_[static_cast<size_t>(i)];
      if (n == 0 && in_prompt_[static_cast<size_t>(i)] == 0) continue;
      float& z = logits[i];
      z = z > 0.0f ? z / o.repetition_penalty : z * o.repetition_penalty;
      if (n > 0) z -= o.presence_penalty + o.frequency_penalty * static_cast<float>(n);
    }
  }
  for (const LogitBias& b : o.logit_bias) logits[b.token] += b.bias;
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

namespace {

// The first of sorted[0..count) (count > 0) whose cumulative probability passes r, else the last.
int32_t draw_sorted(const ProbIndex* sorted, size_t count, float r) {
  float cdf = 0.0f;
  for (size_t i = 0; i < count; ++i) {
    cdf += sorted[i].prob;
    if (r < cdf) return sorted[i].index;
  }
  return sorted[count - 1].index;
}

}  // namespace

int32_t sample_topp(const float* probabilities, int64_t n, float top_p, float coin, ProbIndex* scratch) {
  float cumulative = 0.0f;
  const size_t count = nucleus(probabilities, n, top_p, scratch, &cumulative);
  if (count == 0) return sample_argmax(probabilities, n);
  return draw_sorted(scratch, count, coin * cumulative);
}

int32_t Sampler::sample(float* logits) {
  process(logits);
  const int32_t token = choose(logits);
  count(token);
  return token;
}

// top_k, top-p over the tokens top_k keeps (renormalized), then min_p: the tokens kept, into
// candidates_ by descending probability (ties by index); returns how many (0: none passes top-p's
// cutoff) and *total, their sum.
size_t Sampler::cut(float* p, float* total) {
  const int64_t n = vocab_size_;
  ProbIndex* c = candidates_.data();
  auto before = [](const ProbIndex& a, const ProbIndex& b) {
    return a.prob > b.prob || (a.prob == b.prob && a.index < b.index);
  };
  const bool nucleus_cut = top_p_ > 0.0f && top_p_ < 1.0f;
  const float min_p_floor = options_.min_p * p[sample_argmax(p, n)];
  size_t count = 0;
  float whole = 1.0f;  // what top-p's cumulative sums are taken of
  if (options_.top_k > 0 && options_.top_k < n) {
    for (int64_t i = 0; i < n; ++i) c[i] = {p[i], static_cast<int32_t>(i)};
    count = static_cast<size_t>(options_.top_k);
    std::nth_element(c, c + count - 1, c + n, before);
    whole = 0.0f;
    for (size_t i = 0; i < count; ++i) whole += c[i].prob;
  } else {
    // Without top_k, a token below min_p's floor or run.c's cutoff is never kept: left out before sorting.
    const float run_c_cutoff = (1.0f - top_p_) / static_cast<float>(n - 1);
    const float cutoff = nucleus_cut ? std::max(min_p_floor, run_c_cutoff) : min_p_floor;
    for (int64_t i = 0; i < n; ++i)
      if (p[i] >= cutoff) c[count++] = {p[i], static_cast<int32_t>(i)};
  }
  std::sort(c, c + count, before);
  if (nucleus_cut) {
    float cumulative = 0.0f;
    for (size_t i = 0; i < count; ++i) {
      cumulative += c[i].prob;
      if (cumulative > top_p_ * whole) {
        count = i + 1;
        break;
      }
    }
  }
  while (count > 1 && c[count - 1].prob < min_p_floor) --count;
  *total = 0.0f;
  for (size_t i = 0; i < count; ++i) *total += c[i].prob;
  return count;
}

int32_t Sampler::choose(float* logits) {
  if (temperature_ == 0.0f) return sample_argmax(logits, vocab_size_);
  // A temperature so small that the largest logit divided by it overflows float has no
  // distribution in float (softmax would give NaN): its limit as T -> 0, the greedy choice, is
  // returned, and nothing else changes for ordinary temperatures.
  const int32_t best = sample_argmax(logits, vocab_size_);
  if (!std::isfinite(logits[best] / temperature_)) return best;
  for (int64_t i = 0; i < vocab_size_; ++i) logits[i] /= temperature_;
  softmax_in_place(logits, vocab_size_);
  const float coin = random_f32(&state_);
  if (options_.cuts()) {
    float total = 0.0f;
    const size_t count = cut(logits, &total);
    if (count == 0) return best;
    return draw_sorted(candidates_.data(), count, coin * total);
  }
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
  if (!options_.cuts() && (top_p_ <= 0.0f || top_p_ >= 1.0f)) return;
  // The tokens kept exactly as choose() keeps them; their probabilities over their sum.
  float total = 0.0f;
  const size_t count =
      options_.cuts() ? cut(logits, &total) : nucleus(logits, vocab_size_, top_p_, candidates_.data(), &total);
  std::fill(logits, logits + vocab_size_, 0.0f);
  if (count == 0) {
    logits[best] = 1.0f;
    return;
  }
  for (size_t i = 0; i < count; ++i) logits[candidates_[i].index] = candidates_[i].prob / total;
}

}  // namespace minfer
