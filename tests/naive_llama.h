// An independent oracle for whole-model tests: llama2.c's run.c forward() transcribed in double,
// one token of one sequence at a time, with its own KV cache and its own RoPE angles computed
// from the formula. It shares no code with models/, engine/ or kernels/, so a bug there (a
// classifier that reads the embedding, a wrong position in a batch, a RoPE table with the wrong
// frequency) shows up as a difference from it even where no golden file exists.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "models/llama_weights.h"

namespace minfer::test {

class NaiveLlama {
 public:
  // Host tensors in f32, f16 or bf16, in either RoPE layout (rotate_half rotates pairs
  // (j, j + head_dim / 2), as Hugging Face's checkpoints expect: an independent check of the
  // row permutation LlamaModel applies to them); theta, scaling and epsilon from the config.
  explicit NaiveLlama(const LlamaHostWeights& weights);
  // Feeds `token` at position `pos` (positions 0, 1, 2, ... in order) and returns the logits.
  std::vector<double> forward(int32_t token, int64_t pos);

 private:
  struct Layer {
    std::vector<double> rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3;
  };
  LlamaConfig config_;
  bool rotate_half_;
  std::vector<double> embedding_, classifier_, rms_final_, inv_freq_;
  std::vector<Layer> layers_;
  std::vector<double> k_cache_, v_cache_;  // (n_layers, n_ctx, kv_dim)
};

// Seeded random weights for `config` as host f32 tensors. Matrices are uniform in
// +-gain/sqrt(fan_in), the embedding and classifier in +-1, norms in [0.5, 1.5]: with gain 2 or
// more the attention is sharp enough that the logits depend clearly on the tokens and positions
// (tests check that they do before relying on it).
LlamaHostWeights random_llama_weights(const LlamaConfig& config, uint64_t seed, double gain);

}  // namespace minfer::test
