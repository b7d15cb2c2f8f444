// The bench's bookkeeping, counted by hand from a model's shape: the bytes a decode step reads
// and the floating-point operations of prefill and decode. These are what decode's GB/s and
// prefill's GFLOP/s are computed from, so tests check them against hand counts.
//
//   bytes per decode step (n_seqs sequences, each at position p after the step's token is written):
//     every weight matrix once (wq, wk, wv, wo, w1, w2, w3 per layer, and the classifier; in a
//     layer of experts the router, the shared expert, and the experts the rows are predicted to
//     choose, LlamaConfig::expected_experts_read),
//     the RMSNorm weights (f32), n_seqs rows of the embedding table,
//     and the KV cache read by attention: n_seqs x 2 x K x kv_dim x kv bytes, where K sums the
//     keys each layer attends to: p + 1, at most the window W in a sliding layer.
//   FLOPs of one row at position p: 2 per matrix weight (a multiply and an add) for every layer
//     matrix (of a layer of experts, the k experts the row takes), plus attention 4 x n_heads x head_dim x K (q.k and the weighted sum of v), plus
//     2 x vocab x dim for the classifier when the row's logits are computed.
#pragma once

#include <cstdint>
#include <optional>

#include "core/dtype.h"
#include "engine/model.h"
#include "model/llama_config.h"

namespace minfer {

// Weight matrices of all layers (no classifier) that one row multiplies: a layer of experts' k.
uint64_t layer_matrix_params(const LlamaConfig& c);

// Bytes read by one decode step of n_seqs sequences whose new token sits at position `pos`.
uint64_t decode_step_bytes(const LlamaConfig& c, const WeightTypes& weights, DType kv, int64_t n_seqs, int64_t pos);
// The same for a model as it is stored (types may mix: ModelInfo::step_weight_bytes); with
// `experts_read`, the experts' bytes a step read as counted (LlamaModel::expert_reads) in place of
// the prediction.
uint64_t decode_step_bytes(const ModelInfo& info, const LlamaConfig& c, DType kv, int64_t n_seqs, int64_t pos,
                           std::optional<uint64_t> experts_read = std::nullopt);
// FLOPs of one decode step of n_seqs sequences at position `pos` (logits for every sequence).
uint64_t decode_step_flops(const LlamaConfig& c, int64_t n_seqs, int64_t pos);
// FLOPs of prefilling n_seqs prompts of P tokens (positions 0..P-1; logits for the last row only).
uint64_t prefill_flops(const LlamaConfig& c, int64_t n_seqs, int64_t P);

}  // namespace minfer
