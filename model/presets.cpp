#include "model/presets.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/ref/fill.h"
#include "model/llama.h"

namespace minfer {

namespace {
LlamaConfig shape(int64_t dim, int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads,
                  int64_t vocab, int64_t n_ctx, bool shared) {
  LlamaConfig c;
  c.dim = dim;
  c.hidden_dim = hidden;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.vocab_size = vocab;
  c.n_ctx = n_ctx;
  c.shared_classifier = shared;
  return c;
}

// Qwen2's constants: q, k and v biases, theta 1e6, epsilon 1e-6.
LlamaConfig qwen2(LlamaConfig c) {
  c.qkv_bias = true;
  c.rope_theta = 1000000.0;
  c.rms_eps = 1e-6f;
  return c;
}

// Qwen3's: an RMSNorm of every head of q and k, heads of `head_dim`, theta 1e6, epsilon 1e-6.
LlamaConfig qwen3(LlamaConfig c, int64_t head_dim) {
  c.qk_norm = true;
  c.head_size = head_dim;
  c.rope_theta = 1000000.0;
  c.rms_eps = 1e-6f;
  return c;
}

// Gemma 3's: q, k norms and post norms, GeGLU, embeddings scaled by sqrt(dim), heads of 256 with
// scores scaled by 256^-1/2, and 5 layers in 6 attending in a window of 512 with RoPE base 10000
// (the 6th global, base 1e6); epsilon 1e-6.
LlamaConfig gemma3(LlamaConfig c) {
  c.head_size = 256;
  c.qk_norm = c.post_norms = true;
  c.activation = GluActivation::gelu_tanh;
  c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
  c.attention_scale = 1.0f / 16.0f;
  c.sliding_window = 512;
  for (int64_t l = 0; l < c.n_layers; ++l) c.sliding_layers.push_back(l % 6 != 5);
  c.rope_theta = 1000000.0;
  c.rope_theta_sliding = 10000.0;
  c.rms_eps = 1e-6f;
  return c;
}

// `c` with `layers` layers; a pattern of sliding layers (Gemma 3's 5 in 6), or of dense layers
// among experts, repeats.
LlamaConfig with_layers(LlamaConfig c, int64_t layers) {
  for (std::vector<bool>* flags : {&c.sliding_layers, &c.dense_ffn_layers}) {
    const std::vector<bool> pattern = *flags;
    flags->clear();
    for (int64_t l = 0; l < layers && !pattern.empty(); ++l) flags->push_back(pattern[size_t(l) % pattern.size()]);
  }
  c.n_layers = layers;
  return c;
}
}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {
      {"tiny", shape(64, 172, 5, 8, 4, 512, 512, true), "the shape of llama2.c's stories260K"},
      {"stories15M", shape(288, 768, 6, 6, 6, 32000, 256, true), "llama2.c's stories15M"},
      {"stories42M", shape(512, 1376, 8, 8, 8, 32000, 1024, true), "llama2.c's stories42M"},
      {"stories110M", shape(768, 2048, 12, 12, 12, 32000, 1024, true), "llama2.c's stories110M"},
      {"llama-1b", shape(2048, 5632, 22, 32, 4, 32000, 2048, false), "TinyLlama 1.1B"},
      {"llama-7b", shape(4096, 11008, 32, 32, 32, 32000, 4096, false), "Llama 2 7B"},
      {"qwen2.5-0.5b", qwen2(shape(896, 4864, 24, 14, 2, 151936, 32768, true)), "Qwen2.5 0.5B"},
      {"qwen3-0.6b", qwen3(shape(1024, 3072, 28, 16, 8, 151936, 40960, true), 128), "Qwen3 0.6B"},
      {"gemma3-270m", gemma3(shape(640, 2048, 18, 4, 1, 262144, 32768, true)), "Gemma 3 270M"},
  };
  return all;
}

Preset find_preset(const std::string& name) {
  const size_t colon = name.find(':');
  const std::string base_name = name.substr(0, colon);
  std::string names;
  const Preset* base = nullptr;
  for (const auto& p : presets()) {
    if (p.name == base_name) base = &p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  MINFER_CHECK(base != nullptr, "unknown preset '", base_name, "' (presets: ", names, ")");
  if (colon == std::string::npos) return *base;
  const std::string option = name.substr(colon + 1);
  const std::string digits = option.rfind("layers=", 0) == 0 ? option.substr(7) : std::string();
  MINFER_CHECK(!digits.empty() && digits.size() <= 4 && digits.find_first_not_of("0123456789") == std::string::npos,
               "preset '", name, "': after the name only :layers=N is understood, N from 1 to ", kMaxPresetLayers);
  const int64_t layers = std::stoll(digits);
  MINFER_CHECK(layers >= 1 && layers <= kMaxPresetLayers, "preset '", name, "': layers must be 1 to ", kMaxPresetLayers);
  Preset deeper = *base;
  deeper.name = base_name + ":layers=" + std::to_string(layers);
  deeper.config = with_layers(base->config, layers);
  deeper.note = base->note + ", " + std::to_string(layers) + " layers";
  return deeper;
}

Preset preset_at_least(const std::string& base, uint64_t min_bytes, const WeightTypes& dtype) {
  const Preset shape = find_preset(base);
  const uint64_t fixed = LlamaModel::weight_bytes(with_layers(shape.config, 0), dtype);
  const uint64_t per_layer = LlamaModel::weight_bytes(with_layers(shape.config, 1), dtype) - fixed;
  int64_t layers = shape.config.n_layers;
  if (min_bytes > fixed) layers = std::max<int64_t>(layers, int64_t((min_bytes - fixed + per_layer - 1) / per_layer));
  // A mix's layers differ (more bits in some): the estimate from one layer is checked and grown.
  auto bytes = [&](int64_t n) { return LlamaModel::weight_bytes(with_layers(shape.config, n), dtype); };
  while (layers < kMaxPresetLayers && bytes(layers) < min_bytes) ++layers;
  MINFER_CHECK(layers <= kMaxPresetLayers && bytes(layers) >= min_bytes, "no preset of ", base, "'s shape holds ", min_bytes >> 20, " MiB of ",
               dtype.name(), " weights within ", kMaxPresetLayers, " layers");
  return find_preset(base + ":layers=" + std::to_string(layers));
}

WeightInit weight_init(const LlamaConfig& c, uint64_t model_seed, WeightKind kind, int64_t layer) {
  uint64_t seed = ref::mix64(model_seed ^ (uint64_t(kind) << 32) ^ uint64_t(layer + 1));
  auto around = [&](int64_t fan_in) {
    float a = 1.0f / std::sqrt(static_cast<float>(fan_in));
    return WeightInit{seed, -a, a};
  };
  switch (kind) {
    case WeightKind::embedding:
    case WeightKind::qkv_bias: return {seed, -0.1f, 0.1f};
    case WeightKind::rms_att:
    case WeightKind::rms_ffn:
    case WeightKind::rms_final:
    case WeightKind::qk_norm:
    case WeightKind::post_norm: return {seed, 1.0f, 1.0f};
    case WeightKind::w2: return around(c.ffn_hidden(layer));
    case WeightKind::w2_experts: return around(c.expert_hidden_dim);
    case WeightKind::wo: return around(c.q_dim());
    case WeightKind::wq:
    case WeightKind::wk:
    case WeightKind::wv:
    case WeightKind::w1:
    case WeightKind::w3:
    case WeightKind::router:
    case WeightKind::w1_experts:
    case WeightKind::w3_experts:
    case WeightKind::classifier: return around(c.dim);
  }
  return {seed, 0.0f, 0.0f};
}

}  // namespace minfer
