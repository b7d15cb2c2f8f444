// Perplexity of a model over a token sequence, and how far a second model (the same weights in
// another dtype, say) is from a base one: what a user reads to judge what quantization costs.
//
// The method is llama.cpp's `llama-perplexity`, so the two report the same figure on the same
// weights and text. The tokens are cut into windows of n_ctx; each window starts afresh (empty KV
// cache), with its first token replaced by PerplexityOptions::bos when that is set (`minfer
// perplexity` sets it to BOS where the model's tokenizer puts BOS before a text, as
// llama-perplexity does, and leaves a model that adds none, Qwen2.5's, its own first tokens), and
// only the predictions in its second half are scored: the logits at positions n_ctx/2 .. n_ctx-2 against the tokens that follow, n_ctx/2 - 1 per
// window, so every scored token has at least n_ctx/2 tokens of context. Tokens past the last
// whole window are not used.
//
//   perplexity = exp(mean NLL),  NLL = log sum_j exp(z_j) - z_target   (log-softmax in double)
//   its uncertainty = perplexity * sqrt(var(NLL) / (n - 1))
//
// Against a base model, for each scored position with base probabilities p and test ones q:
//   KL(p || q) = sum_j p_j (log p_j - log q_j)   (nats; 0 when the logits are identical)
// reported as the mean and the 99th percentile over positions, and the top-1 agreement: the share
// of positions where both models' most likely token is the same.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "engine/model.h"

namespace minfer {

struct PerplexityOptions {
  int64_t n_ctx = 512;         // a window's length (>= 4, at most the model's context; `-c`, llama.cpp's n_ctx),
                               // and the context of the decoder that scores it
  int64_t max_windows = 0;     // 0: every whole window
  int64_t max_rows = 512;      // positions per forward pass
  std::optional<int32_t> bos;  // the token each window's first is replaced by; unset: the text's own
  std::optional<DType> kv_dtype;  // both models' KV cache; unset: the decoder's default
};

struct KlStats {
  double kl_mean = 0.0, kl_p99 = 0.0, kl_max = 0.0;
  double top1_agreement = 0.0;
  double base_ppl = 0.0;
};

struct PerplexityResult {
  double ppl = 0.0;
  double ppl_error = 0.0;  // one standard error, as llama.cpp prints it after "+/-"
  int64_t n_tokens = 0;    // scored predictions
  int64_t n_windows = 0;
  double seconds = 0.0;
  std::optional<KlStats> kl;  // with a base model
};

// Windows of `tokens` through `model` (and `base`, when given, on the same windows). Throws Error
// when the tokens do not fill one window or when the two models' vocabularies differ.
// on_window(done, total, ppl so far) is called after each window.
PerplexityResult perplexity(Model& model, Model* base, const std::vector<int32_t>& tokens,
                            const PerplexityOptions& options,
                            const std::function<void(int64_t, int64_t, double)>& on_window = nullptr);

// log sum_j exp(z_j) over n logits, in double.
double log_sum_exp(const float* z, int64_t n);

}  // namespace minfer
