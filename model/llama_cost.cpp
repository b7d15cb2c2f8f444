#include "model/llama_cost.h"

#include <algorithm>

namespace minfer {

uint64_t layer_matrix_params(const LlamaConfig& c) {
  uint64_t d = c.dim, h = c.hidden_dim, q = c.q_dim(), kv = c.kv_dim();
  return uint64_t(c.n_layers) * (2 * q * d + 2 * kv * d + 3 * h * d);
}

namespace {

// The keys a row at position `pos` attends to, summed over the layers: pos + 1 in each, at most the
// window in a sliding layer.
uint64_t attended_keys(const LlamaConfig& c, int64_t pos) {
  uint64_t keys = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const int64_t window = c.attention_spec(l).window;
    keys += uint64_t(window > 0 ? std::min(pos + 1, window) : pos + 1);
  }
  return keys;
}

// The same summed over the rows of a prompt of P positions (0 .. P - 1).
uint64_t prompt_attended_keys(const LlamaConfig& c, int64_t P) {
  uint64_t keys = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const uint64_t p = uint64_t(P), w = uint64_t(c.attention_spec(l).window);
    if (w == 0 || p <= w) keys += p * (p + 1) / 2;
    else keys += w * (w + 1) / 2 + (p - w) * w;  // rows past the window see w keys each
  }
  return keys;
}

uint64_t kv_cache_step_bytes(const LlamaConfig& c, DType kv, int64_t n_seqs, int64_t pos) {
  return uint64_t(n_seqs) * 2 * attended_keys(c, pos) * uint64_t(c.kv_dim()) * dtype_bytes(kv, 1);
}

}  // namespace

uint64_t decode_step_bytes(const LlamaConfig& c, const WeightTypes& weights, DType kv, int64_t n_seqs, int64_t pos) {
  uint64_t d = c.dim;
  const DType classifier = weights.of(WeightRole::classifier, 0, c.n_layers, c.dim);
  const DType table = c.shared_classifier ? classifier : weights.of(WeightRole::embedding, 0, c.n_layers, c.dim);
  uint64_t matrices = c.layer_matrix_bytes(weights) + dtype_bytes(classifier, uint64_t(c.vocab_size) * d);
  // The norms (Gemma 3's post norms too), and Qwen's q, k, v biases and q, k norms, in f32.
  uint64_t norms = ((c.post_norms ? 4 : 2) * uint64_t(c.n_layers) + 1) * d * 4;
  if (c.qkv_bias) norms += uint64_t(c.n_layers) * uint64_t(c.q_dim() + 2 * c.kv_dim()) * 4;
  if (c.qk_norm) norms += uint64_t(c.n_layers) * 2 * uint64_t(c.head_dim()) * 4;
  uint64_t embedding_rows = uint64_t(n_seqs) * dtype_bytes(table, d);
  return matrices + norms + embedding_rows + kv_cache_step_bytes(c, kv, n_seqs, pos);
}

uint64_t decode_step_bytes(const ModelInfo& info, const LlamaConfig& c, DType kv, int64_t n_seqs, int64_t pos) {
  return info.step_weight_bytes + uint64_t(n_seqs) * info.embedding_row_bytes + kv_cache_step_bytes(c, kv, n_seqs, pos);
}

uint64_t decode_step_flops(const LlamaConfig& c, int64_t n_seqs, int64_t pos) {
  uint64_t per_row = 2 * layer_matrix_params(c) + 2 * uint64_t(c.vocab_size) * uint64_t(c.dim) +
                     4 * uint64_t(c.q_dim()) * attended_keys(c, pos);
  return uint64_t(n_seqs) * per_row;
}

uint64_t prefill_flops(const LlamaConfig& c, int64_t n_seqs, int64_t P) {
  uint64_t p = uint64_t(P);
  uint64_t matrices = 2 * layer_matrix_params(c) * p;
  uint64_t attention = 4 * uint64_t(c.q_dim()) * prompt_attended_keys(c, P);
  uint64_t classifier = 2 * uint64_t(c.vocab_size) * uint64_t(c.dim);
  return uint64_t(n_seqs) * (matrices + attention + classifier);
}

}  // namespace minfer
