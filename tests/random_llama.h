// Seeded random Llama weights for whole-model tests, and the one-page forward's logits
// (model/naive_llama.h) widened to double for the tests' comparisons.
#pragma once

#include <cstdint>
#include <vector>

#include "model/llama_weights.h"
#include "model/naive_llama.h"

namespace minfer::test {

// Seeded random weights for `config` as host f32 tensors. Matrices are uniform in
// +-gain/sqrt(fan_in) (a router's in 4 times that), the embedding and classifier in +-1, norms in
// [0.5, 1.5]; a dense model draws the same values whatever the expert fields. With gain 2 or
// more the attention is sharp enough that the logits depend clearly on the tokens and positions
// (tests check that they do before relying on it).
LlamaHostWeights random_llama_weights(const LlamaConfig& config, uint64_t seed, double gain);

// A small grouped-query model (dim 64, feed-forward 96, 2 layers, 4 heads over 2 KV heads, its own
// classifier) with `vocab` tokens and `n_ctx` positions: the shape the scoring tests share.
LlamaConfig small_gqa_config(int64_t vocab, int64_t n_ctx);

// NaiveLlama::forward's logits as doubles.
std::vector<double> naive_forward(NaiveLlama& model, int32_t token, int64_t pos);

}  // namespace minfer::test
