// Named synthetic models ("preset:stories15M") and the seeded recipe for their weights.
//
// A preset is a shape plus a seed: its weights are drawn from the counter-based generator of
// kernels/ref/fill.h, one stream per (weight kind, layer), directly on the device that will use
// them. `minfer make-model` writes the same weights to a file, so a preset and its file agree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/llama_config.h"

namespace minfer {

struct Preset {
  std::string name;
  LlamaConfig config;
  std::string note;
};

const std::vector<Preset>& presets();
// The preset called `name` (without "preset:"); Error listing the names otherwise. "NAME:layers=N"
// is NAME's shape with N layers (each layer's weights as NAME's own, layer for layer): a model of a
// chosen size, such as one larger than the last-level cache.
Preset find_preset(const std::string& name);
constexpr int64_t kMaxPresetLayers = 1024;

// The preset of `base`'s shape with the fewest layers (never fewer than its own) whose weights,
// stored as `dtype`, take at least `min_bytes`: "stories110M:layers=35" for 1 GiB of f32 weights.
// It is how the main job and the bytes lesson get a model that must stream from main memory.
Preset preset_at_least(const std::string& base, uint64_t min_bytes, const WeightTypes& dtype);

// note: a kind's value seeds its stream, so a new kind goes last.
enum class WeightKind {
  embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, classifier, qkv_bias, qk_norm, post_norm,
  router, w1_experts, w2_experts, w3_experts
};

struct WeightInit {
  uint64_t seed;
  float lo, hi;
};

// The stream and range of one weight of a synthetic model: norms (the q, k and post norms too) are 1, matrices uniform in
// +-1/sqrt(fan_in) (so activations neither vanish nor explode), the embedding and the q, k, v
// biases uniform in +-0.1.
WeightInit weight_init(const LlamaConfig& config, uint64_t model_seed, WeightKind kind, int64_t layer);

constexpr uint64_t kDefaultModelSeed = 20260101;

}  // namespace minfer
