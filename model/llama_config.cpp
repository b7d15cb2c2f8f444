#include "model/llama_config.h"

#include <cmath>
#include <utility>

#include "core/checked.h"
#include "core/error.h"

namespace minfer {

namespace {
void check_range(const std::string& source, const char* field, int64_t value, int64_t lo,
                 int64_t hi) {
  if (value < lo || value > hi)
    fail(source, ": ", field, " = ", value, ", must be in [", lo, ", ", hi, "]");
}
}  // namespace

void LlamaConfig::validate(const std::string& source) const {
  check_range(source, "dim", dim, 1, kMaxDim);
  check_range(source, "hidden_dim", hidden_dim, 1, kMaxHiddenDim);
  check_range(source, "n_layers", n_layers, 1, kMaxLayers);
  check_range(source, "n_heads", n_heads, 1, kMaxHeads);
  check_range(source, "n_kv_heads", n_kv_heads, 1, n_heads);
  // Token ids 1 and 2 are BOS and EOS (llama2.c's convention): a vocabulary must hold them.
  check_range(source, "vocab_size", vocab_size, 3, kMaxVocab);
  check_range(source, "context length", n_ctx, 1, kMaxCtx);
  check_range(source, "head size", head_size, 0, kMaxDim);
  if (head_size == 0 && dim % n_heads != 0)
    fail(source, ": dim = ", dim, " is not a multiple of n_heads = ", n_heads);
  if (head_dim() % 2 != 0)
    fail(source, ": head size ", head_dim(), " must be even (RoPE rotates pairs)");
  if (q_dim() > kMaxDim) fail(source, ": n_heads x head_dim = ", q_dim(), " exceeds ", kMaxDim);
  if (!(rms_eps > 0.0f && rms_eps < 1.0f)) fail(source, ": rms_norm_eps = ", rms_eps, ", must be in (0, 1)");
  if (!(rope_theta > 1.0 && rope_theta < 1e12)) fail(source, ": rope_theta = ", rope_theta, ", must be in (1, 1e12)");
  const RopeScaling& r = rope_scaling;
  if (r.type != RopeScaling::Type::none && r.type != RopeScaling::Type::factors &&
      !(r.factor >= 1.0 && r.factor <= 1e6))
    fail(source, ": rope scaling factor = ", r.factor, ", must be in [1, 1e6]");
  if (r.type == RopeScaling::Type::llama3 &&
      !(r.low_freq_factor > 0.0 && r.high_freq_factor > r.low_freq_factor && r.original_max_positions > 0))
    fail(source, ": llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings > 0");
  if (r.type == RopeScaling::Type::factors) {
    if (int64_t(r.factors.size()) != head_dim() / 2)
      fail(source, ": ", r.factors.size(), " rope frequency factors for heads of ", head_dim(), " (", head_dim() / 2,
           " expected)");
    for (float f : r.factors)
      if (!(f > 0.0f && f < 1e6f)) fail(source, ": a rope frequency factor of ", f, " is not in (0, 1e6)");
  }
  if (bos_id < -1 || bos_id >= vocab_size) fail(source, ": bos_token_id = ", bos_id, " is outside the vocabulary");
  for (int32_t id : stop_ids)
    if (id < 0 || id >= vocab_size) fail(source, ": eos_token_id = ", id, " is outside the vocabulary");
  if (n_heads % n_kv_heads != 0)
    fail(source, ": n_heads = ", n_heads, " is not a multiple of n_kv_heads = ", n_kv_heads);
  if (!(embedding_scale > 0.0f && embedding_scale < 1e6f))
    fail(source, ": embedding scale = ", embedding_scale, ", must be in (0, 1e6)");
  if (!(attention_scale >= 0.0f && attention_scale < 1e6f))
    fail(source, ": attention scale = ", attention_scale, ", must be in [0, 1e6)");
  check_range(source, "sliding_window", sliding_window, 0, kMaxCtx);
  if (!sliding_layers.empty() && int64_t(sliding_layers.size()) != n_layers)
    fail(source, ": ", sliding_layers.size(), " layer types for ", n_layers, " layers");
  if (rope_theta_sliding != 0.0 && !(rope_theta_sliding > 1.0 && rope_theta_sliding < 1e12))
    fail(source, ": the sliding layers' rope_theta = ", rope_theta_sliding, ", must be in (1, 1e12)");
  validate_experts(source);
}

void LlamaConfig::validate_experts(const std::string& source) const {
  if (qk_norm_whole && !qk_norm) fail(source, ": q and k norms over the whole projection need qk_norm");
  if (n_experts == 0) {
    if (n_experts_used != 0 || expert_hidden_dim != 0 || shared_expert_hidden_dim != 0 || !dense_ffn_layers.empty())
      fail(source, ": expert fields set without experts (n_experts = 0)");
    return;
  }
  check_range(source, "n_experts", n_experts, 1, kMaxExperts);
  check_range(source, "n_experts_used", n_experts_used, 1, n_experts);
  check_range(source, "expert_hidden_dim", expert_hidden_dim, 1, kMaxHiddenDim);
  check_range(source, "shared_expert_hidden_dim", shared_expert_hidden_dim, 0, kMaxHiddenDim);
  if (!dense_ffn_layers.empty() && int64_t(dense_ffn_layers.size()) != n_layers)
    fail(source, ": ", dense_ffn_layers.size(), " dense feed-forward flags for ", n_layers, " layers");
}

DType matrix_dtype(DType wanted, int64_t in_features) {
  if (!is_quantized(wanted) || in_features % dtype_block(wanted) == 0) return wanted;
  DType legacy = DType::f16;  // llama.cpp's quantizer takes IQ4_NL for q2_k and q3_k, which minfer lacks
  if (wanted == DType::q4_k) legacy = DType::q5_0;
  if (wanted == DType::q5_k) legacy = DType::q5_1;
  if (wanted == DType::q6_k) legacy = DType::q8_0;
  return in_features % 32 == 0 ? legacy : DType::f16;
}

namespace {

// llama.cpp's use_more_bits: the layers whose wv and w2 the _M mixes keep at more bits.
bool more_bits(int64_t layer, int64_t n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

}  // namespace

WeightTypes WeightTypes::k_mix_of(DType mix_base) {
  MINFER_CHECK(mix_base == DType::q4_k || mix_base == DType::q5_k, "no K-quant mix of ", dtype_name(mix_base),
               " (q4_k_m and q5_k_m)");
  WeightTypes t(mix_base);
  t.k_mix_ = true;
  return t;
}

std::optional<WeightTypes> WeightTypes::parse(const std::string& name) {
  if (name == "q4_k_m") return k_mix_of(DType::q4_k);
  if (name == "q5_k_m") return k_mix_of(DType::q5_k);
  try {
    const DType type = parse_dtype(name.c_str());
    if (type != DType::i32) return WeightTypes(type);
  } catch (const Error&) {  // not a dtype's name
  }
  return std::nullopt;
}

std::string WeightTypes::name() const { return std::string(dtype_name(base)) + (k_mix_ ? "_m" : ""); }

DType WeightTypes::of(WeightRole role, int64_t layer, int64_t n_layers, int64_t in_features) const {
  if (role == WeightRole::router) return DType::f32;
  DType type = base;
  if (k_mix_ && (role == WeightRole::classifier ||
                ((role == WeightRole::wv || role == WeightRole::w2) && more_bits(layer, n_layers))))
    type = DType::q6_k;
  return matrix_dtype(type, in_features);
}

std::array<LlamaConfig::MatrixShape, 7> LlamaConfig::layer_matrix_shapes(int64_t layer) const {
  const int64_t d = dim, h = ffn_hidden(layer), q = q_dim(), kv = kv_dim();
  return {{{WeightRole::wq, q, d},
           {WeightRole::wk, kv, d},
           {WeightRole::wv, kv, d},
           {WeightRole::wo, d, q},
           {WeightRole::w1, h, d},
           {WeightRole::w3, h, d},
           {WeightRole::w2, d, h}}};
}

std::array<LlamaConfig::MatrixShape, 3> LlamaConfig::expert_matrix_shapes() const {
  const int64_t d = dim, f = expert_hidden_dim;
  return {{{WeightRole::w1, f, d}, {WeightRole::w3, f, d}, {WeightRole::w2, d, f}}};
}

uint64_t LlamaConfig::layer_matrix_bytes(const WeightTypes& wanted) const {
  const char* what = "model size";
  uint64_t bytes = 0;
  auto add = [&](WeightRole role, int64_t l, uint64_t count, int64_t rows, int64_t in) {
    const uint64_t n = checked_product({count, uint64_t(rows), uint64_t(in)}, what);
    bytes = checked_add(bytes, dtype_bytes(wanted.of(role, l, n_layers, in), n), what);
  };
  for (int64_t l = 0; l < n_layers; ++l) {
    for (const MatrixShape& m : layer_matrix_shapes(l)) add(m.role, l, 1, m.rows, m.in);
    if (!layer_has_experts(l)) continue;
    for (const MatrixShape& m : expert_matrix_shapes()) add(m.role, l, uint64_t(n_experts), m.rows, m.in);
    add(WeightRole::router, l, 1, router_rows(), dim);
  }
  return bytes;
}

std::vector<float> LlamaConfig::rope_inv_freq(bool sliding) const {
  const int64_t half = head_dim() / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  const float base = static_cast<float>(sliding ? rope_theta_sliding : rope_theta);
  const RopeScaling r = sliding ? RopeScaling() : rope_scaling;
  for (int64_t j = 0; j < half; ++j) {
    float f = 1.0f / std::pow(base, static_cast<float>(2 * j) / static_cast<float>(head_dim()));
    switch (r.type) {
      case RopeScaling::Type::none: break;
      case RopeScaling::Type::linear: f = f / static_cast<float>(r.factor); break;
      case RopeScaling::Type::factors: f = f / r.factors[static_cast<size_t>(j)]; break;
      case RopeScaling::Type::llama3: {
        const float factor = static_cast<float>(r.factor), low = static_cast<float>(r.low_freq_factor),
                    high = static_cast<float>(r.high_freq_factor), old = static_cast<float>(r.original_max_positions);
        const float wavelen = 2.0f * 3.14159265358979323846f / f;
        if (wavelen > old / low) {
          f = f / factor;
        } else if (!(wavelen < old / high)) {
          const float smooth = (old / wavelen - low) / (high - low);
          f = (1.0f - smooth) * f / factor + smooth * f;
        }
        break;
      }
    }
    inv[static_cast<size_t>(j)] = f;
  }
  return inv;
}

namespace {

// The weights of the layers' matrices and the classifier, with `experts` experts a layer of experts.
uint64_t matmul_params(const LlamaConfig& c, int64_t experts) {
  const char* what = "parameter count";
  uint64_t total = checked_mul(static_cast<uint64_t>(c.vocab_size), uint64_t(c.dim), what);  // the classifier
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (const LlamaConfig::MatrixShape& m : c.layer_matrix_shapes(l))
      total = checked_add(total, checked_mul(uint64_t(m.rows), uint64_t(m.in), what), what);
    if (!c.layer_has_experts(l)) continue;
    const uint64_t router = checked_mul(uint64_t(c.router_rows()), uint64_t(c.dim), what);
    const uint64_t expert = checked_mul(3 * uint64_t(c.expert_hidden_dim), uint64_t(c.dim), what);
    total = checked_add(total, checked_add(router, checked_mul(uint64_t(experts), expert, what), what), what);
  }
  return total;
}

}  // namespace

double LlamaConfig::expected_experts_read(int64_t rows) const {
  if (n_experts == 0) return 0.0;
  const double E = double(n_experts), k = double(n_experts_used);
  return E * (1.0 - std::pow(1.0 - k / E, double(rows)));
}

uint64_t LlamaConfig::n_matmul_params() const { return matmul_params(*this, n_experts); }

uint64_t LlamaConfig::n_active_matmul_params() const { return matmul_params(*this, n_experts_used); }

uint64_t LlamaConfig::n_params() const {
  const char* what = "parameter count";
  uint64_t d = dim, layers = n_layers;
  uint64_t norms = checked_add(checked_mul(2 * layers, d, what), d, what);
  uint64_t total = checked_add(n_matmul_params(), norms, what);
  if (qkv_bias) total = checked_add(total, checked_mul(layers, uint64_t(q_dim() + 2 * kv_dim()), what), what);
  if (qk_norm) total = checked_add(total, checked_mul(layers, uint64_t(q_norm_dim() + k_norm_dim()), what), what);
  if (post_norms) total = checked_add(total, checked_mul(2 * layers, d, what), what);
  // The classifier counted above is the embedding table when shared, another matrix when not.
  if (!shared_classifier)
    total = checked_add(total, checked_mul(static_cast<uint64_t>(vocab_size), d, what), what);
  return total;
}

const char* LlamaConfig::family_feature() const {
  if (n_experts > 0) return "a mixture of experts (Qwen3-MoE, OLMoE, Mixtral, Qwen2-MoE)";
  if (qkv_bias) return "q, k and v biases (Qwen2)";
  if (qk_norm) return "q and k norms (Qwen3, Gemma 3)";
  if (post_norms) return "post norms (Gemma 3)";
  if (activation != GluActivation::silu) return "GeGLU (Gemma)";
  if (embedding_scale != 1.0f) return "an embedding scale (Gemma)";
  if (attention_scale != 0.0f) return "an attention scale (Gemma)";
  if (sliding_window != 0) return "a sliding window (Mistral v0.1, Phi-3, Gemma 3)";
  return nullptr;
}

std::string LlamaConfig::describe() const {
  return detail::concat("dim ", dim, ", hidden ", hidden_dim, ", ", n_layers, " layers, ", n_heads,
                        "/", n_kv_heads, " heads", head_size > 0 ? detail::concat(" of ", head_size) : "",
                        ", vocab ", vocab_size, ", ctx ", n_ctx, shared_classifier ? "" : ", separate classifier",
                        qkv_bias ? ", qkv bias" : "", qk_norm ? ", qk norm" : "", post_norms ? ", post norms" : "",
                        activation == GluActivation::silu ? "" : ", GeGLU",
                        sliding_window > 0 ? detail::concat(", window ", sliding_window) : "",
                        n_experts > 0 ? detail::concat(", ", n_experts_used, " of ", n_experts, " experts of ",
                                                       expert_hidden_dim) : "",
                        shared_expert_hidden_dim > 0 ? detail::concat(", shared expert of ", shared_expert_hidden_dim)
                                                     : "");
}

}  // namespace minfer
