// Named synthetic models ("preset:stories15M") and the seeded recipe for their weights.
//
// A preset is a shape plus a seed: its weights are drawn from the counter-based generator of
// kernels/ref/fill.h, one stream per (weight kind, layer), directly on the device that will use
// them. `minfer make-model` writes the same weights to a file, so a preset and its file agree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/llama_config.h"

namespace minfer {

struct Preset {
  std::string name;
  LlamaConfig config;
  std::string note;
};

const std::vector<Preset>& presets();
// The preset called `name` (without "preset:"); Error listing the names otherwise.
const Preset& find_preset(const std::string& name);

enum class WeightKind { embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, classifier };

struct WeightInit {
  uint64_t seed;
  float lo, hi;
};

// The stream and range of one weight of a synthetic model: norms are 1, matrices uniform in
// +-1/sqrt(fan_in) (so activations neither vanish nor explode), the embedding uniform in +-1.
WeightInit weight_init(const LlamaConfig& config, uint64_t model_seed, WeightKind kind, int64_t layer);

constexpr uint64_t kDefaultModelSeed = 20260101;

}  // namespace minfer
