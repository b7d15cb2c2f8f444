#include "models/llama_config.h"

#include "core/checked.h"
#include "core/error.h"

namespace minfer {

namespace {
void check_range(const std::string& source, const char* field, int64_t value, int64_t lo,
                 int64_t hi) {
  if (value < lo || value > hi)
    fail(source, ": ", field, " = ", value, ", must be in [", lo, ", ", hi, "]");
}
}  // namespace

void LlamaConfig::validate(const std::string& source) const {
  check_range(source, "dim", dim, 1, kMaxDim);
  check_range(source, "hidden_dim", hidden_dim, 1, kMaxHiddenDim);
  check_range(source, "n_layers", n_layers, 1, kMaxLayers);
  check_range(source, "n_heads", n_heads, 1, kMaxHeads);
  check_range(source, "n_kv_heads", n_kv_heads, 1, n_heads);
  // Token ids 1 and 2 are BOS and EOS (llama2.c's convention): a vocabulary must hold them.
  check_range(source, "vocab_size", vocab_size, 3, kMaxVocab);
  check_range(source, "seq_len", n_ctx, 1, kMaxCtx);
  if (dim % n_heads != 0)
    fail(source, ": dim = ", dim, " is not a multiple of n_heads = ", n_heads);
  if (head_dim() % 2 != 0)
    fail(source, ": head size dim / n_heads = ", head_dim(), " must be even (RoPE rotates pairs)");
  if (n_heads % n_kv_heads != 0)
    fail(source, ": n_heads = ", n_heads, " is not a multiple of n_kv_heads = ", n_kv_heads);
}

uint64_t LlamaConfig::n_matmul_params() const {
  const char* what = "parameter count";
  uint64_t d = dim, h = hidden_dim, kv = kv_dim(), layers = n_layers;
  // per layer: wq, wo (d x d); wk, wv (kv x d); w1, w3 (h x d); w2 (d x h)
  uint64_t per_layer = checked_add(checked_mul(2 * d, d, what),
                                   checked_add(checked_mul(2 * kv, d, what),
                                               checked_mul(3 * h, d, what), what),
                                   what);
  uint64_t classifier = checked_mul(static_cast<uint64_t>(vocab_size), d, what);
  return checked_add(checked_mul(layers, per_layer, what), classifier, what);
}

uint64_t LlamaConfig::n_params() const {
  const char* what = "parameter count";
  uint64_t d = dim, layers = n_layers;
  uint64_t norms = checked_add(checked_mul(2 * layers, d, what), d, what);
  uint64_t total = checked_add(n_matmul_params(), norms, what);
  // The classifier counted above is the embedding table when shared, another matrix when not.
  if (!shared_classifier)
    total = checked_add(total, checked_mul(static_cast<uint64_t>(vocab_size), d, what), what);
  return total;
}

std::string LlamaConfig::describe() const {
  return detail::concat("dim ", dim, ", hidden ", hidden_dim, ", ", n_layers, " layers, ", n_heads,
                        "/", n_kv_heads, " heads, vocab ", vocab_size, ", ctx ", n_ctx,
                        shared_classifier ? "" : ", separate classifier");
}

}  // namespace minfer
