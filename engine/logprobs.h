// Log-probabilities of sampled tokens (and of a prompt's tokens, for echo: ServeRequest::prompt_logprobs),
// as OpenAI's `logprobs` reports them: log-softmax of the model's raw logits row (before the
// temperature, the penalties, the bias or a grammar's mask),
// the sampled token's and the n most likely tokens' (ties by index), n at most kMaxTopLogprobs.
// Values in nats, computed in double as `minfer perplexity` computes them (log_sum_exp,
// engine/perplexity.h), so that a token's logprob is minus its NLL there.
#pragma once

#include <cstdint>
#include <vector>

namespace minfer {

struct TokenLogprob {
  int32_t token;
  float logprob;
};

// What a request learns about one sampled token (ServeRequest::on_logprobs): `top` points at
// n_top entries, most likely first, valid during the callback only.
struct SampledLogprobs {
  TokenLogprob sampled;
  const TokenLogprob* top;
  int n_top;
};

// One logits row's log-softmax, kept for the token chosen from it after the row is changed.
// Allocates when made only: a copy of a row and kMaxTopLogprobs entries.
class RowLogprobs {
 public:
  static constexpr int kMaxTopLogprobs = 20;
  explicit RowLogprobs(int64_t vocab_size);
  // Reads a raw row[vocab_size] (before it is changed), with its n_top most likely tokens.
  void read(const float* row, int n_top);
  // The token's entry and the top ones of the row read last.
  SampledLogprobs of(int32_t token) const;

 private:
  std::vector<float> row_;
  double log_sum_exp_ = 0.0;
  std::vector<TokenLogprob> top_;
};

}  // namespace minfer
