#include "model/llama_cost.h"

#include <algorithm>
#include <cmath>

namespace minfer {

uint64_t layer_matrix_params(const LlamaConfig& c) {
  return c.n_active_matmul_params() - uint64_t(c.vocab_size) * uint64_t(c.dim);
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

// The bytes of the experts a step of n_seqs rows is expected to read, from one expert's bytes
// summed over the layers of experts (LlamaConfig::expected_experts_read).
uint64_t expert_step_bytes(const LlamaConfig& c, uint64_t expert_bytes, int64_t n_seqs) {
  return uint64_t(std::llround(double(expert_bytes) * c.expected_experts_read(n_seqs)));
}

// One expert's matrices summed over the layers of experts, stored as `weights` asks.
uint64_t one_expert_bytes(const LlamaConfig& c, const WeightTypes& weights) {
  uint64_t bytes = 0;
  for (int64_t l = 0; l < c.n_layers; ++l)
    if (c.layer_has_experts(l))
      for (const LlamaConfig::MatrixShape& m : c.expert_matrix_shapes())
        bytes += dtype_bytes(weights.of(m.role, l, c.n_layers, m.in), uint64_t(m.rows) * uint64_t(m.in));
  return bytes;
}

}  // namespace

uint64_t decode_step_bytes(const LlamaConfig& c, const WeightTypes& weights, DType kv, int64_t n_seqs, int64_t pos) {
  uint64_t d = c.dim;
  const DType classifier = weights.of(WeightRole::classifier, 0, c.n_layers, c.dim);
  const DType table = c.shared_classifier ? classifier : weights.of(WeightRole::embedding, 0, c.n_layers, c.dim);
  const uint64_t expert = one_expert_bytes(c, weights);
  uint64_t matrices = c.layer_matrix_bytes(weights) - expert * uint64_t(c.n_experts) +
                      dtype_bytes(classifier, uint64_t(c.vocab_size) * d);
  // The norms (Gemma 3's post norms too), and Qwen's q, k, v biases and q, k norms, in f32.
  uint64_t norms = ((c.post_norms ? 4 : 2) * uint64_t(c.n_layers) + 1) * d * 4;
  if (c.qkv_bias) norms += uint64_t(c.n_layers) * uint64_t(c.q_dim() + 2 * c.kv_dim()) * 4;
  if (c.qk_norm) norms += uint64_t(c.n_layers) * uint64_t(c.q_norm_dim() + c.k_norm_dim()) * 4;
  uint64_t embedding_rows = uint64_t(n_seqs) * dtype_bytes(table, d);
  return matrices + expert_step_bytes(c, expert, n_seqs) + norms + embedding_rows + kv_cache_step_bytes(c, kv, n_seqs, pos);
}

uint64_t decode_step_bytes(const ModelInfo& info, const LlamaConfig& c, DType kv, int64_t n_seqs, int64_t pos,
                           std::optional<uint64_t> experts_read) {
  return info.step_weight_bytes + experts_read.value_or(expert_step_bytes(c, info.expert_bytes, n_seqs)) +
         uint64_t(n_seqs) * info.embedding_row_bytes + kv_cache_step_bytes(c, kv, n_seqs, pos);
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
