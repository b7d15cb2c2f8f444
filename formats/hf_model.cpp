#include "formats/hf_model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "core/splitmix.h"
#include "formats/safetensors.h"

namespace minfer {

namespace {

using json = nlohmann::json;
constexpr uint64_t kMaxJsonBytes = uint64_t(16) << 20;

// note: nlohmann::json copies and prints values recursively, so a document is refused past this
// depth while it is parsed (a config.json is three levels deep; 16 MiB of '[' would overflow the
// stack).
constexpr int kMaxJsonDepth = 64;

json parse_json(const std::string& text, const std::string& source) {
  try {
    return json::parse(text, [&](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth) fail(source, ": JSON nested deeper than ", kMaxJsonDepth, " levels");
      return true;
    });
  } catch (const json::exception& e) {
    fail(source, ": not valid JSON (", e.what(), ")");
  }
}

json read_json(const std::string& path, const std::string& what) {
  return parse_json(InputFile(path, what).read_all(kMaxJsonBytes), path);
}

// doc[key] as an integer: `fallback` where it is absent or null, Error where it is not an integer.
int64_t integer_or(const json& doc, const char* key, int64_t fallback, const std::string& source) {
  if (!doc.contains(key) || doc[key].is_null()) return fallback;
  if (!doc[key].is_number_integer()) fail(source, ": ", key, " is not an integer");
  return doc[key].get<int64_t>();
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The ids of a bos_token_id / eos_token_id field: an int, a list of ints, or null.
std::vector<int32_t> token_ids(const json& v, const std::string& source, const char* key) {
  std::vector<int32_t> ids;
  auto one = [&](const json& x) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
      fail(source, ": ", key, " must be a token id or a list of them");
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  };
  if (v.is_null()) return ids;
  if (v.is_array()) {
    if (v.size() > 64) fail(source, ": ", key, " lists ", v.size(), " ids");
    for (const auto& x : v) one(x);
  } else {
    one(v);
  }
  return ids;
}

// Gemma 3's sliding layers' own RoPE base: transformers 5's rope_parameters.sliding_attention
// {rope_type: default, rope_theta}, or rope_local_base_freq; 10000 where neither is given
// (transformers' default).
void read_sliding_rope(const json& doc, const std::string& source, LlamaConfig* c) {
  const json* theta = nullptr;
  if (doc.contains("rope_parameters") && doc["rope_parameters"].is_object() &&
      doc["rope_parameters"].contains("sliding_attention")) {
    const json& sliding = doc["rope_parameters"]["sliding_attention"];
    if (!sliding.is_object() || (sliding.contains("rope_type") && sliding["rope_type"] != "default"))
      fail(source, ": the sliding layers' RoPE (rope_parameters.sliding_attention) must be of type default");
    if (sliding.contains("rope_theta")) theta = &sliding["rope_theta"];
  } else if (doc.contains("rope_local_base_freq")) {
    theta = &doc["rope_local_base_freq"];
  }
  c->rope_theta_sliding = 10000.0;
  if (theta == nullptr) return;
  if (!theta->is_number()) fail(source, ": the sliding layers' rope_theta is not a number");
  c->rope_theta_sliding = theta->get<double>();
}

void read_rope(const json& doc, const std::string& source, LlamaConfig* c) {
  // transformers 5 writes rope_parameters {rope_theta, rope_type, ...} (Gemma 3: one such object
  // per layer type, full_attention's for the global layers); earlier versions (and the files on
  // the Hub) rope_theta beside rope_scaling {rope_type or type, ...}, or null.
  json scaling;
  if (doc.contains("rope_parameters") && doc["rope_parameters"].is_object()) {
    scaling = doc["rope_parameters"];
    if (scaling.contains("full_attention")) {
      const json full = std::move(scaling["full_attention"]);
      scaling = full;
    }
    if (!scaling.is_object()) fail(source, ": rope_parameters.full_attention is not an object");
    if (scaling.contains("rope_theta")) {
      if (!scaling["rope_theta"].is_number()) fail(source, ": rope_parameters.rope_theta is not a number");
      c->rope_theta = scaling["rope_theta"].get<double>();
    }
  } else if (doc.contains("rope_scaling")) {
    scaling = doc["rope_scaling"];
  }
  if (doc.contains("rope_theta")) {
    if (!doc["rope_theta"].is_number()) fail(source, ": rope_theta is not a number");
    c->rope_theta = doc["rope_theta"].get<double>();
  }
  if (scaling.is_null()) return;
  if (!scaling.is_object()) fail(source, ": rope_scaling is neither an object nor null");
  std::string type = "default";
  if (scaling.contains("rope_type") && scaling["rope_type"].is_string()) type = scaling["rope_type"].get<std::string>();
  else if (scaling.contains("type") && scaling["type"].is_string()) type = scaling["type"].get<std::string>();
  auto number = [&](const char* key, double fallback) {
    if (!scaling.contains(key)) return fallback;
    if (!scaling[key].is_number()) fail(source, ": rope scaling's ", key, " is not a number");
    return scaling[key].get<double>();
  };
  RopeScaling& r = c->rope_scaling;
  if (type == "default") {
    r.type = RopeScaling::Type::none;
  } else if (type == "linear") {
    r.type = RopeScaling::Type::linear;
    r.factor = number("factor", 1.0);
  } else if (type == "llama3") {
    r.type = RopeScaling::Type::llama3;
    r.factor = number("factor", 8.0);
    r.low_freq_factor = number("low_freq_factor", 1.0);
    r.high_freq_factor = number("high_freq_factor", 4.0);
    const double original = number("original_max_position_embeddings", 8192);
    if (!(original >= 1 && original <= 1e9)) fail(source, ": original_max_position_embeddings = ", original);
    r.original_max_positions = static_cast<int64_t>(original);
  } else {
    fail(source, ": rope scaling of type '", type, "' is not supported (minfer supports llama3 and linear)");
  }
}

// The architectures minfer runs (config.json's architectures, or model_type) and how each differs
// from Llama's.
struct HfArchitecture {
  const char* name;
  const char* model_type;
  bool qkv_bias;  // q_proj, k_proj and v_proj carry a .bias
  bool qk_norm;   // self_attn.q_norm and k_norm: an RMSNorm of every head of q and k
  bool fused;     // self_attn.qkv_proj and mlp.gate_up_proj hold q | k | v and gate | up
  // Gemma 3: post norms (post_attention_layernorm is one; the feed-forward's input norm is
  // pre_feedforward_layernorm), RMSNorm weights stored as w for x (1 + w), embeddings scaled by
  // sqrt(dim), scores by query_pre_attn_scalar^-1/2, and the classifier tied unless said otherwise.
  bool gemma3;
  // A mixture of experts in every layer (or the layers its config says: read_experts), whose
  // config names its counts with these keys; nullptr: a dense model.
  const char* experts_key;       // the experts in a layer
  const char* expert_width_key;  // an expert's hidden width
};
constexpr HfArchitecture kArchitectures[] = {
    {"LlamaForCausalLM", "llama", false, false, false, false, nullptr, nullptr},
    {"MistralForCausalLM", "mistral", false, false, false, false, nullptr, nullptr},  // a Llama
    {"Qwen2ForCausalLM", "qwen2", true, false, false, false, nullptr, nullptr},
    {"Qwen3ForCausalLM", "qwen3", false, true, false, false, nullptr, nullptr},
    {"Phi3ForCausalLM", "phi3", false, false, true, false, nullptr, nullptr},
    {"Gemma3ForCausalLM", "gemma3_text", false, true, false, true, nullptr, nullptr},
    {"Qwen3MoeForCausalLM", "qwen3_moe", false, true, false, false, "num_experts", "moe_intermediate_size"},
    {"OlmoeForCausalLM", "olmoe", false, true, false, false, "num_experts", "intermediate_size"},
    {"MixtralForCausalLM", "mixtral", false, false, false, false, "num_local_experts", "intermediate_size"},
    {"Qwen2MoeForCausalLM", "qwen2_moe", true, false, false, false, "num_experts", "moe_intermediate_size"},
};

std::string architecture_names() {
  std::string names;
  for (const HfArchitecture& a : kArchitectures) names += (names.empty() ? "" : ", ") + std::string(a.name);
  return names;
}

const HfArchitecture& find_architecture(const json& doc, const std::string& source) {
  std::string names;
  if (doc.contains("architectures")) {
    const json& a = doc["architectures"];
    if (a.is_array())
      for (const auto& x : a)
        if (x.is_string()) {
          names += (names.empty() ? "" : ", ") + x.get<std::string>();
          for (const HfArchitecture& arch : kArchitectures)
            if (x.get<std::string>() == arch.name) return arch;
        }
    fail(source, ": architecture ", names.empty() ? "(none)" : names, " is not supported (minfer runs ",
         architecture_names(), ")");
  }
  if (doc.contains("model_type") && doc["model_type"].is_string())
    for (const HfArchitecture& arch : kArchitectures)
      if (doc["model_type"] == arch.model_type) return arch;
  fail(source, ": neither architectures nor model_type names an architecture minfer runs (", architecture_names(), ")");
}

// Which layers attend in a sliding window of sliding_window keys, as transformers decides:
//   Llama: none (transformers' Llama attends to every key whatever the config says);
//   Qwen: none unless use_sliding_window is on (its sliding_window is set but unused without it);
//   then layer_types, where given: "sliding_attention" or "full_attention" per layer (transformers
//     5 writes it for Qwen2, Qwen3 and Gemma 3);
//   else Gemma 3's sliding_window_pattern n (older configs; 6 where absent, transformers' default):
//     layer l slides unless (l + 1) % n == 0;
//   else Qwen's max_window_layers: the layers from it on;
//   else Mistral's and Phi-3's sliding_window, where not null: every layer.
void read_sliding_window(const json& doc, const HfArchitecture& arch, const std::string& source, LlamaConfig* c) {
  const std::string type = arch.model_type;
  const bool qwen = type == "qwen2" || type == "qwen3";
  // transformers' Qwen MoE classes choose their sliding layers by rules of their own (Qwen3-MoE:
  // every layer; Qwen2-MoE: the even layers below max_window_layers), which minfer does not follow.
  if ((type == "qwen2_moe" || type == "qwen3_moe") && doc.contains("use_sliding_window") &&
      doc["use_sliding_window"].is_boolean() && doc["use_sliding_window"].get<bool>())
    fail(source, ": sliding windows in ", arch.name, " (use_sliding_window) are not supported");
  if (std::string(arch.model_type) == "llama") return;
  if (qwen && !(doc.contains("use_sliding_window") && doc["use_sliding_window"].is_boolean() &&
                doc["use_sliding_window"].get<bool>()))
    return;
  std::vector<bool> slides;
  if (doc.contains("layer_types") && doc["layer_types"].is_array()) {
    for (const auto& t : doc["layer_types"]) {
      if (t != "sliding_attention" && t != "full_attention")
        fail(source, ": a layer type ", t.is_string() ? "'" + t.get<std::string>().substr(0, 40) + "'" : "that is not a string",
             " (minfer runs sliding_attention and full_attention)");
      slides.push_back(t == "sliding_attention");
    }
    if (int64_t(slides.size()) != c->n_layers)
      fail(source, ": layer_types lists ", slides.size(), " layers of ", c->n_layers);
  } else if (arch.gemma3) {
    const int64_t n = integer_or(doc, "sliding_window_pattern", 6, source);
    if (n < 1) fail(source, ": sliding_window_pattern = ", n, ", must be positive");
    for (int64_t l = 0; l < c->n_layers && l < LlamaConfig::kMaxLayers; ++l) slides.push_back((l + 1) % n != 0);
  } else if (qwen) {
    const int64_t first = integer_or(doc, "max_window_layers", 28, source);  // transformers' Qwen default
    for (int64_t l = 0; l < c->n_layers && l < LlamaConfig::kMaxLayers; ++l) slides.push_back(l >= first);
  } else if (!doc.contains("sliding_window") || doc["sliding_window"].is_null()) {
    return;
  }
  bool any = slides.empty();  // no list: every layer
  for (bool s : slides) any = any || s;
  if (!any) return;
  if (!doc.contains("sliding_window") || !doc["sliding_window"].is_number_integer() ||
      doc["sliding_window"].get<int64_t>() < 1)
    fail(source, ": the model attends in a sliding window, but sliding_window is not a positive integer");
  c->sliding_window = doc["sliding_window"].get<int64_t>();
  c->sliding_layers = slides;
}

// The activation of the feed-forward's gate: Gemma's hidden_activation (gelu_pytorch_tanh where
// absent), the others' hidden_act (silu where absent), as transformers reads them.
GluActivation read_activation(const json& doc, const HfArchitecture& arch, const std::string& source) {
  const char* key = arch.gemma3 ? "hidden_activation" : "hidden_act";
  if (!doc.contains(key)) return arch.gemma3 ? GluActivation::gelu_tanh : GluActivation::silu;
  if (doc[key] == "silu") return GluActivation::silu;
  if (doc[key] == "gelu_pytorch_tanh") return GluActivation::gelu_tanh;
  fail(source, ": ", key, " ", doc[key].is_string() ? "'" + doc[key].get<std::string>().substr(0, 40) + "'" : "(not a string)",
       " is not supported (minfer's gated units use silu or gelu_pytorch_tanh)");
}

// A mixture of experts' counts and routing. The counts and widths must be given (a config without
// them is refused); norm_topk_prob, decoder_sparse_step and shared_expert_intermediate_size take
// transformers' defaults where absent:
//   Qwen3-MoE, Qwen2-MoE: num_experts (or num_local_experts), num_experts_per_tok, moe_intermediate_size, norm_topk_prob
//     (false), and the layers that stay dense: those in mlp_only_layers and those where (l + 1) %
//     decoder_sparse_step != 0; Qwen2-MoE's shared expert, shared_expert_intermediate_size wide;
//   OLMoE: num_experts (or num_local_experts), num_experts_per_tok, intermediate_size, norm_topk_prob (false), and q and k
//     norms over the whole projection;
//   Mixtral: num_local_experts (or num_experts), num_experts_per_tok, intermediate_size; its softmax over the top k
//     is a renormalisation.
void read_experts(const json& doc, const HfArchitecture& arch, const std::string& source, LlamaConfig* c) {
  const std::string type = arch.model_type;
  const bool qwen = type == "qwen2_moe" || type == "qwen3_moe";
  // Either name is read: transformers 5 writes Qwen3-MoE's count as num_local_experts where the
  // Hub's files say num_experts, and maps one name to the other for Qwen3-MoE, OLMoE and Mixtral
  // (attribute_map).
  const char* alias = std::string(arch.experts_key) == "num_experts" ? "num_local_experts" : "num_experts";
  c->n_experts = integer_or(doc, arch.experts_key, integer_or(doc, alias, 0, source), source);
  if (c->n_experts <= 0) fail(source, ": ", arch.experts_key, " must be a positive integer");
  c->n_experts_used = integer_or(doc, "num_experts_per_tok", 0, source);
  c->expert_hidden_dim = integer_or(doc, arch.expert_width_key, 0, source);
  c->normalize_expert_weights = type == "mixtral" || (doc.contains("norm_topk_prob") && doc["norm_topk_prob"].is_boolean() &&
                                                      doc["norm_topk_prob"].get<bool>());
  c->qk_norm_whole = type == "olmoe";
  if (type == "olmoe" && doc.contains("clip_qkv") && !doc["clip_qkv"].is_null())
    fail(source, ": clipping q, k and v (clip_qkv) is not supported");
  if (type == "qwen2_moe") c->shared_expert_hidden_dim = integer_or(doc, "shared_expert_intermediate_size", 5632, source);
  if (!qwen) return;
  const int64_t step = integer_or(doc, "decoder_sparse_step", 1, source);
  if (step < 1) fail(source, ": decoder_sparse_step = ", step, ", must be positive");
  std::vector<bool> dense(size_t(std::clamp<int64_t>(c->n_layers, 0, LlamaConfig::kMaxLayers)), false);
  bool any = false;
  for (size_t l = 0; l < dense.size(); ++l) any |= dense[l] = (int64_t(l) + 1) % step != 0;
  if (doc.contains("mlp_only_layers") && !doc["mlp_only_layers"].is_null()) {
    const json& only = doc["mlp_only_layers"];
    if (!only.is_array() || only.size() > dense.size()) fail(source, ": mlp_only_layers is not a list of layers");
    for (const json& l : only) {
      if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() >= int64_t(dense.size()))
        fail(source, ": mlp_only_layers names a layer the model does not have");
      dense[size_t(l.get<int64_t>())] = any = true;
    }
  }
  if (any) c->dense_ffn_layers = dense;
}

}  // namespace

LlamaConfig parse_hf_config(const std::string& text, const std::string& source) {
  const json doc = parse_json(text, source);
  if (!doc.is_object()) fail(source, ": not a JSON object");
  const HfArchitecture& arch = find_architecture(doc, source);
  auto integer = [&](const char* key, bool required, int64_t fallback) -> int64_t {
    if (required && (!doc.contains(key) || doc[key].is_null())) fail(source, ": ", key, " is missing");
    return integer_or(doc, key, fallback, source);
  };
  auto flag = [&](const char* key) { return doc.contains(key) && doc[key].is_boolean() && doc[key].get<bool>(); };
  if (flag("attention_bias")) fail(source, ": attention biases (attention_bias) are not supported");
  for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping"})
    if (doc.contains(key) && !doc[key].is_null()) fail(source, ": soft-capping (", key, ") is not supported");
  if (flag("use_bidirectional_attention")) fail(source, ": bidirectional attention is not supported");
  if (flag("mlp_bias")) fail(source, ": MLP biases (mlp_bias) are not supported");
  if (doc.contains("partial_rotary_factor") && doc["partial_rotary_factor"] != 1.0)
    fail(source, ": partial rotary embeddings (partial_rotary_factor) are not supported");
  LlamaConfig c;
  c.qkv_bias = arch.qkv_bias;
  c.qk_norm = arch.qk_norm;
  c.activation = read_activation(doc, arch, source);
  c.post_norms = arch.gemma3;
  c.dim = integer("hidden_size", true, 0);
  c.hidden_dim = integer("intermediate_size", true, 0);
  c.n_layers = integer("num_hidden_layers", true, 0);
  c.n_heads = integer("num_attention_heads", true, 0);
  c.n_kv_heads = integer("num_key_value_heads", false, c.n_heads);
  c.vocab_size = integer("vocab_size", true, 0);
  c.n_ctx = integer("max_position_embeddings", true, 0);
  const int64_t head_dim = integer("head_dim", false, 0);
  if (head_dim != 0 && (c.n_heads <= 0 || head_dim != c.dim / c.n_heads || c.dim % c.n_heads != 0)) c.head_size = head_dim;
  // transformers' default where the key is absent: tied for Gemma, untied for the others
  c.shared_classifier = doc.contains("tie_word_embeddings") ? flag("tie_word_embeddings") : arch.gemma3;
  if (arch.gemma3) c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
  if (arch.gemma3) {  // transformers' Gemma 3 defaults: query_pre_attn_scalar 256, rope_theta 1e6
    double scalar = 256.0;
    if (doc.contains("query_pre_attn_scalar"))
      scalar = doc["query_pre_attn_scalar"].is_number() ? doc["query_pre_attn_scalar"].get<double>() : -1.0;
    if (!(scalar > 0.0 && scalar < 1e12)) fail(source, ": query_pre_attn_scalar is not a positive number");
    c.attention_scale = static_cast<float>(1.0 / std::sqrt(scalar));
    c.rope_theta = 1000000.0;
  }
  if (doc.contains("rms_norm_eps")) {
    if (!doc["rms_norm_eps"].is_number()) fail(source, ": rms_norm_eps is not a number");
    c.rms_eps = static_cast<float>(doc["rms_norm_eps"].get<double>());
  } else {
    c.rms_eps = 1e-6f;  // transformers' LlamaConfig default
  }
  read_rope(doc, source, &c);
  read_sliding_window(doc, arch, source, &c);
  if (arch.gemma3 && c.sliding_window > 0) read_sliding_rope(doc, source, &c);
  if (arch.experts_key != nullptr) read_experts(doc, arch, source, &c);
  const std::vector<int32_t> bos = token_ids(doc.value("bos_token_id", json()), source, "bos_token_id");
  c.bos_id = bos.empty() ? -1 : bos[0];
  c.stop_ids = token_ids(doc.value("eos_token_id", json()), source, "eos_token_id");
  c.validate(source);
  return c;
}

std::string hf_model_folder(const std::string& path) {
  if (is_directory(path)) return path;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
}

LlamaConfig read_hf_config(const std::string& folder) {
  const std::string config_path = folder + "/config.json";
  struct stat st;
  if (::stat(config_path.c_str(), &st) != 0)
    fail(folder, ": a directory, but not a Hugging Face model folder (", config_path, ": ", std::strerror(errno), ")");
  const std::string text = InputFile(config_path, "model config").read_all(kMaxJsonBytes);
  LlamaConfig c = parse_hf_config(text, config_path);
  const std::string generation = folder + "/generation_config.json";
  if (is_file(generation)) {
    const json g = read_json(generation, "generation config");
    if (g.is_object() && g.contains("bos_token_id")) {
      const std::vector<int32_t> bos = token_ids(g["bos_token_id"], generation, "bos_token_id");
      c.bos_id = bos.empty() ? -1 : bos[0];
    }
    if (g.is_object() && g.contains("eos_token_id")) c.stop_ids = token_ids(g["eos_token_id"], generation, "eos_token_id");
    c.validate(generation);
  }
  return c;
}

namespace {

// A layer of experts' weights, in either form a checkpoint stores them:
//   the Hub's, a matrix per expert: mlp.experts.E.{gate,up,down}_proj.weight (Mixtral's
//     block_sparse_moe.experts.E.{w1,w3,w2}.weight), and the router mlp.gate.weight
//     (block_sparse_moe.gate.weight);
//   transformers 5's in memory, a tensor per kind: mlp.experts.gate_up_proj (experts, 2 f, dim),
//     each expert's gate rows then its up rows, and mlp.experts.down_proj (experts, dim, f);
// and Qwen2-MoE's shared expert, mlp.shared_expert.{gate,up,down}_proj.weight, with its gate
// mlp.shared_expert_gate.weight (1, dim).
template <class Get, class Has>
void read_expert_layer(Get&& get, Has&& has, const LlamaConfig& c, const std::string& p, const std::string& folder,
                       LlamaHostWeights::Layer* layer) {
  const bool mixtral = has(p + "block_sparse_moe.gate.weight");
  const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
  const int64_t E = c.n_experts, f = c.expert_hidden_dim;
  layer->router = get(moe + "gate.weight");
  if (has(moe + "experts.gate_up_proj")) {
    const Tensor gate_up = get(moe + "experts.gate_up_proj"), down = get(moe + "experts.down_proj");
    if (gate_up.ndim() != 3 || gate_up.size(0) != E || gate_up.size(1) != 2 * f || down.ndim() != 3 || down.size(0) != E)
      fail(folder, ": ", moe, "experts.gate_up_proj ", gate_up.str(), " or down_proj ", down.str(),
           " does not hold the config's ", E, " experts of ", f);
    for (int64_t e = 0; e < E; ++e) {
      const Tensor expert = gate_up.select(0, e);
      layer->w1_experts.push_back(expert.slice(0, 0, f));
      layer->w3_experts.push_back(expert.slice(0, f, 2 * f));
      layer->w2_experts.push_back(down.select(0, e));
    }
  } else {
    const char* names[3] = {"gate_proj", "up_proj", "down_proj"};
    if (mixtral) names[0] = "w1", names[1] = "w3", names[2] = "w2";
    for (int64_t e = 0; e < E; ++e) {
      const std::string at = moe + "experts." + std::to_string(e) + ".";
      layer->w1_experts.push_back(get(at + names[0] + ".weight"));
      layer->w3_experts.push_back(get(at + names[1] + ".weight"));
      layer->w2_experts.push_back(get(at + names[2] + ".weight"));
    }
  }
  if (c.shared_expert_hidden_dim == 0) return;
  layer->w1 = get(p + "mlp.shared_expert.gate_proj.weight");
  layer->w3 = get(p + "mlp.shared_expert.up_proj.weight");
  layer->w2 = get(p + "mlp.shared_expert.down_proj.weight");
  layer->shared_gate = get(p + "mlp.shared_expert_gate.weight");
}

}  // namespace

LlamaHostWeights load_hf_weights(const std::string& path) {
  const std::string folder = hf_model_folder(path);
  LlamaHostWeights w;
  w.config = read_hf_config(folder);
  const LlamaConfig& c = w.config;
  // The shards: the index's files, or the one .safetensors named or found.
  std::vector<std::string> shard_paths;
  std::map<std::string, std::string> shard_of;  // tensor name -> shard path, from the index
  const std::string index_path = folder + "/model.safetensors.index.json";
  if (is_file(index_path) && (is_directory(path) || !is_file(path) || path.find(".safetensors") != std::string::npos)) {
    const json index = read_json(index_path, "safetensors index");
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      fail(index_path, ": no weight_map object");
    std::set<std::string> files;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail(index_path, ": weight_map['", it.key(), "'] is not a file name");
      const std::string file = it.value().get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file == "..")
        fail(index_path, ": weight_map names '", file, "', not a file beside the index");
      shard_of[it.key()] = folder + "/" + file;
      files.insert(folder + "/" + file);
    }
    shard_paths.assign(files.begin(), files.end());
  } else if (is_directory(path)) {
    shard_paths = {folder + "/model.safetensors"};
  } else {
    shard_paths = {path};
  }
  auto shards = std::make_shared<std::map<std::string, std::shared_ptr<SafetensorsFile>>>();
  for (const std::string& p : shard_paths) (*shards)[p] = std::make_shared<SafetensorsFile>(p);
  w.owner = shards;
  const std::string config_text = InputFile(folder + "/config.json", "model config").read_all(kMaxJsonBytes);
  w.header_digest = digest_bytes(config_text.data(), config_text.size());
  for (const auto& [p, file] : *shards)
    w.header_digest = digest_bytes(file->file()->data(), file->header().data_offset, w.header_digest);
  auto get = [&](const std::string& name) -> Tensor {
    auto s = shard_of.find(name);
    if (s != shard_of.end()) return shards->at(s->second)->view(name);
    for (const auto& [p, file] : *shards)
      if (file->has(name)) return file->view(name);
    fail(folder, ": the weights lack '", name, "'");
  };
  auto is_qkv_bias = [](const std::string& name) {
    for (const char* proj : {".self_attn.q_proj.bias", ".self_attn.k_proj.bias", ".self_attn.v_proj.bias"}) {
      const size_t n = std::strlen(proj);
      if (name.size() > n && name.compare(name.size() - n, n, proj) == 0) return true;
    }
    return false;
  };
  for (const auto& [p, file] : *shards)
    for (const auto& [name, entry] : file->header().tensors)
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0 && !(c.qkv_bias && is_qkv_bias(name)))
        fail(p, ": tensor '", name, "' is a bias the architecture does not have");
  auto has = [&](const std::string& name) {
    if (shard_of.count(name) != 0) return true;
    for (const auto& [p, file] : *shards)
      if (file->has(name)) return true;
    return false;
  };
  w.token_embedding = get("model.embed_tokens.weight");
  w.rms_final = get("model.norm.weight");
  w.classifier = c.shared_classifier ? w.token_embedding : get("lm_head.weight");
  w.layers.resize(static_cast<size_t>(c.n_layers));
  const HfArchitecture& arch = find_architecture(read_json(folder + "/config.json", "model config"), folder);
  const bool fused = arch.fused;
  const int64_t q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LlamaHostWeights::Layer& layer = w.layers[static_cast<size_t>(l)];
    layer.rms_att = get(p + "input_layernorm.weight");
    if (fused) {  // Phi-3: one tensor of q | k | v rows, one of gate | up rows
      const Tensor qkv = get(p + "self_attn.qkv_proj.weight"), gate_up = get(p + "mlp.gate_up_proj.weight");
      if (qkv.ndim() != 2 || qkv.size(0) != q + 2 * kv || gate_up.ndim() != 2 || gate_up.size(0) != 2 * h)
        fail(folder, ": layer ", l, "'s qkv_proj ", qkv.str(), " or gate_up_proj ", gate_up.str(),
             " does not hold the config's q | k | v and gate | up rows");
      layer.wq = qkv.slice(0, 0, q);
      layer.wk = qkv.slice(0, q, q + kv);
      layer.wv = qkv.slice(0, q + kv, q + 2 * kv);
      layer.w1 = gate_up.slice(0, 0, h);
      layer.w3 = gate_up.slice(0, h, 2 * h);
    } else {
      layer.wq = get(p + "self_attn.q_proj.weight");
      layer.wk = get(p + "self_attn.k_proj.weight");
      layer.wv = get(p + "self_attn.v_proj.weight");
      if (!c.layer_has_experts(l)) {
        layer.w1 = get(p + "mlp.gate_proj.weight");
        layer.w3 = get(p + "mlp.up_proj.weight");
        layer.w2 = get(p + "mlp.down_proj.weight");
      }
    }
    if (c.qkv_bias) {
      layer.bq = get(p + "self_attn.q_proj.bias");
      layer.bk = get(p + "self_attn.k_proj.bias");
      layer.bv = get(p + "self_attn.v_proj.bias");
    }
    if (c.qk_norm) {
      layer.q_norm = get(p + "self_attn.q_norm.weight");
      layer.k_norm = get(p + "self_attn.k_norm.weight");
    }
    layer.wo = get(p + "self_attn.o_proj.weight");
    if (c.post_norms) {  // Gemma 3's names: post_attention_layernorm is a post norm
      layer.post_att_norm = get(p + "post_attention_layernorm.weight");
      layer.rms_ffn = get(p + "pre_feedforward_layernorm.weight");
      layer.post_ffn_norm = get(p + "post_feedforward_layernorm.weight");
    } else {
      layer.rms_ffn = get(p + "post_attention_layernorm.weight");
    }
    if (fused) layer.w2 = get(p + "mlp.down_proj.weight");
    if (c.layer_has_experts(l)) read_expert_layer(get, has, c, p, folder, &layer);
  }
  w.rotate_half = true;
  w.norm_weight_offset = arch.gemma3 ? 1.0f : 0.0f;
  // transformers multiplies Gemma's embeddings by sqrt(dim) rounded to the table's type (25.25, not
  // 25.298, for a bf16 table of 640).
  if (w.token_embedding.dtype() == DType::bf16) w.config.embedding_scale = bf16_to_f32(f32_to_bf16(c.embedding_scale));
  if (w.token_embedding.dtype() == DType::f16) w.config.embedding_scale = f16_to_f32(f32_to_f16(c.embedding_scale));
  w.release = [shards](const Tensor& t) {
    for (const auto& [p, file] : *shards) file->file()->drop(t.data(), t.nbytes());
  };
  w.validate(folder);
  return w;
}

}  // namespace minfer
