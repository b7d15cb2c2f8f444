#include "tests/random_llama.h"

#include <cmath>
#include <random>

#include "tests/op_harness.h"

namespace minfer::test {

std::vector<double> naive_forward(NaiveLlama& model, int32_t token, int64_t pos) {
  const std::vector<float>& logits = model.forward(token, pos);
  return std::vector<double>(logits.begin(), logits.end());
}

LlamaHostWeights random_llama_weights(const LlamaConfig& c, uint64_t seed, double gain) {
  c.validate("random_llama_weights");
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), V = c.vocab_size;
  auto matrix = [&](std::vector<int64_t> shape, int64_t fan_in) {
    const float bound = static_cast<float>(gain / std::sqrt(double(fan_in)));
    return host_random(shape, rng, -bound, bound);
  };
  LlamaHostWeights w;
  w.config = c;
  w.token_embedding = host_random({V, d}, rng, -1.0f, 1.0f);
  w.rms_final = host_random({d}, rng, 0.5f, 1.5f);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LlamaHostWeights::Layer layer;
    layer.rms_att = host_random({d}, rng, 0.5f, 1.5f);
    layer.rms_ffn = host_random({d}, rng, 0.5f, 1.5f);
    layer.wq = matrix({q, d}, d);
    layer.wk = matrix({kv, d}, d);
    layer.wv = matrix({kv, d}, d);
    layer.wo = matrix({d, q}, q);
    const int64_t ffn = c.ffn_hidden(l);  // h, or a layer of experts' shared expert (0: none)
    if (ffn > 0) {
      layer.w1 = matrix({ffn, d}, d);
      layer.w2 = matrix({d, ffn}, ffn);
      layer.w3 = matrix({ffn, d}, d);
    }
    if (c.layer_has_experts(l)) {
      // The router's logits spread over several units, so that the k-th and (k+1)-th experts are
      // rarely near a tie that rounding could swap between backends.
      layer.router = matrix({c.n_experts, d}, d);
      for (int64_t i = 0; i < layer.router.numel(); ++i) layer.router.data_as<float>()[i] *= 4.0f;
      const int64_t f = c.expert_hidden_dim;
      for (int64_t e = 0; e < c.n_experts; ++e) {
        layer.w1_experts.push_back(matrix({f, d}, d));
        layer.w2_experts.push_back(matrix({d, f}, f));
        layer.w3_experts.push_back(matrix({f, d}, d));
      }
      if (c.shared_expert_hidden_dim > 0) layer.shared_gate = matrix({1, d}, d);
    }
    if (c.qkv_bias) {
      layer.bq = host_random({q}, rng, -0.5f, 0.5f);
      layer.bk = host_random({kv}, rng, -0.5f, 0.5f);
      layer.bv = host_random({kv}, rng, -0.5f, 0.5f);
    }
    if (c.qk_norm) {
      layer.q_norm = host_random({c.q_norm_dim()}, rng, 0.5f, 1.5f);
      layer.k_norm = host_random({c.k_norm_dim()}, rng, 0.5f, 1.5f);
    }
    if (c.post_norms) {
      layer.post_att_norm = host_random({d}, rng, 0.5f, 1.5f);
      layer.post_ffn_norm = host_random({d}, rng, 0.5f, 1.5f);
    }
    w.layers.push_back(layer);
  }
  w.classifier = c.shared_classifier ? w.token_embedding : host_random({V, d}, rng, -1.0f, 1.0f);
  return w;
}

LlamaConfig small_gqa_config(int64_t vocab, int64_t n_ctx) {
  LlamaConfig c;
  c.dim = 64;
  c.hidden_dim = 96;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = vocab;
  c.n_ctx = n_ctx;
  c.shared_classifier = false;
  return c;
}

}  // namespace minfer::test
