// Start here. The whole Llama forward pass for one sequence, one token at a time, in plain loops:
// llama2.c's run.c forward(), with grouped-query attention and the RoPE variants of Hugging Face
// checkpoints, and each family's declared difference (model/llama_config.h) where it applies:
// Qwen2's biases, Qwen3's and Gemma 3's per-head norms, Gemma's scaled embeddings, GeGLU, post
// norms, attention scale and sliding windows, and the mixtures of experts' routing (Qwen3-MoE,
// OLMoE, Mixtral, Qwen2-MoE). (Phi-3 differs only in how its file stores q | k | v
// and gate | up, split by the loaders, and in its window; Mistral v0.2 and later is a Llama.) No
// backend, no batch, no threads; f32 weights and activations, sums in double.
// Everything else in minfer computes
// exactly this, faster:
//   - model/llama.cpp (LlamaModel::forward_layer_unfused, and _fused in fewer passes) runs the
//     same steps on many rows (tokens of many sequences) at once, as calls on the backend
//     interface (engine/backend.h);
//   - each such call has a plain-loop reference in kernels/ref/ and fast versions in
//     kernels/cpu/ and kernels/cuda/; the comments in model/naive_llama.cpp name them, step by
//     step, and engine/cuda_choices.h chooses among the CUDA ones (engine/backend_cuda.cu
//     launches them).
//
// Run it: `minfer naive -m MODEL -i "Once upon a time"` (cli/cli_naive.cpp). The tests hold the
// reference backend, and through it the CPU and CUDA backends, to it on every random model shape
// (tests/test_whole_model.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "model/llama_weights.h"

namespace minfer {

class NaiveLlama {
 public:
  // Copies the weights (host tensors of any float or quantized type, as the loaders in formats/
  // return them) as f32, and keeps a KV cache of `n_ctx` positions, its sequence's context (0: the
  // model's context, LlamaConfig::n_ctx).
  explicit NaiveLlama(const LlamaHostWeights& weights, int64_t n_ctx = 0);
  // Feeds `token` at position `pos` (0, 1, 2, ... in order) and returns the logits (vocab).
  const std::vector<float>& forward(int32_t token, int64_t pos);
  const LlamaConfig& config() const { return config_; }
  int64_t n_ctx() const { return n_ctx_; }

 private:
  void attention_block(int64_t layer, int64_t pos);
  void feed_forward_block(int64_t layer);
  void mixture_of_experts(int64_t layer);

  struct Layer {
    std::vector<float> rms_att;  // (dim)
    std::vector<float> wq;       // (q_dim, dim)
    std::vector<float> wk;       // (kv_dim, dim)
    std::vector<float> wv;       // (kv_dim, dim)
    std::vector<float> wo;       // (dim, q_dim)
    std::vector<float> rms_ffn;  // (dim)
    std::vector<float> w1;       // (hidden, dim): the gate (a layer of experts: the shared expert's, or empty)
    std::vector<float> w2;       // (dim, hidden): down
    std::vector<float> w3;       // (hidden, dim): up
    // A layer of experts: the router and each expert's gate, down and up; empty in a dense layer.
    std::vector<float> router;                         // (n_experts, dim)
    std::vector<std::vector<float>> w1_experts;        // n_experts of (expert_hidden, dim)
    std::vector<std::vector<float>> w2_experts;        // n_experts of (dim, expert_hidden)
    std::vector<std::vector<float>> w3_experts;        // n_experts of (expert_hidden, dim)
    std::vector<float> shared_gate;                    // (dim): Qwen2-MoE's shared expert's; empty without
    std::vector<float> bq, bk, bv;  // (q_dim), (kv_dim), (kv_dim): Qwen2's biases; empty without
    std::vector<float> q_norm, k_norm;  // (head_dim) each: Qwen3's, Gemma 3's per-head norms (OLMoE's: q_dim,
                                        // kv_dim, over the whole projection); empty without
    std::vector<float> post_att_norm, post_ffn_norm;  // (dim) each: Gemma 3's post norms; empty without
  };
  LlamaConfig config_;
  int64_t n_ctx_;
  bool rotate_half_;                 // wq, wk rows in Hugging Face's order (model/llama_weights.h)
  std::vector<float> embedding_;     // (vocab, dim)
  std::vector<float> classifier_;    // (vocab, dim)
  std::vector<float> rms_final_;     // (dim)
  std::vector<double> inv_freq_;     // (head_dim / 2): RoPE frequencies
  std::vector<double> inv_freq_sliding_;  // (head_dim / 2): the sliding layers' own (Gemma 3); empty without
  std::vector<Layer> layers_;
  std::vector<float> key_cache_;     // (n_layers, n_ctx, kv_dim)
  std::vector<float> value_cache_;   // (n_layers, n_ctx, kv_dim)
  // The current token's activations, allocated once.
  std::vector<float> x_;       // (dim): the residual stream
  std::vector<float> xb_;      // (dim): a block's normalised input, then its output
  std::vector<float> q_;       // (q_dim)
  std::vector<float> att_;     // (q_dim): attention output, head after head
  std::vector<float> scores_;  // (n_ctx): one head's attention weights
  std::vector<float> hb_;      // (hidden): act(w1 x) * w3 x (the widest: a dense layer's, an expert's)
  std::vector<float> hb2_;     // (hidden): w3 x
  std::vector<float> router_;  // (n_experts): the router's logits
  std::vector<float> expert_out_;  // (dim): one expert's output
  std::vector<float> logits_;  // (vocab)
};

}  // namespace minfer
