#include "formats/gguf_model.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "formats/gguf.h"

namespace minfer {

namespace {

// The architectures minfer runs (general.architecture, which also prefixes every key) and how each
// differs from llama's.
struct GgufArchitecture {
  const char* name;
  bool qkv_bias;     // blk.N.attn_{q,k,v}.bias
  bool qk_norm;      // blk.N.attn_{q,k}_norm.weight: an RMSNorm of every head of q and k
  bool rotate_half;  // q and k rows in Hugging Face's rotate-half order (llama.cpp's NEOX RoPE)
  bool fused;        // blk.N.attn_qkv holds q | k | v, and blk.N.ffn_up gate | up (no ffn_gate)
  // Gemma 3: blk.N.post_attention_norm and post_ffw_norm, GeGLU, embeddings scaled by sqrt(dim),
  // and with a sliding window 5 layers in 6 slide (ARCH.attention.sliding_window_pattern where
  // given), rotating by base 10000 (ARCH.rope.freq_base_swa where given), as llama.cpp reads it.
  bool gemma3;
  // A mixture of experts where ARCH.expert_count > 0 (blk.N.ffn_gate_inp, ffn_{gate,up,down}_exps),
  // whose top k weights llama.cpp renormalises for this architecture (it reads no key for it, and
  // neither does minfer); OLMoE's q and k norms span the whole projection.
  bool normalize_experts;
  bool qk_norm_whole;
};
// note: llama.cpp's converter permutes a llama model's q and k rows to interleaved pairs and
// leaves Qwen's, Phi-3's and Gemma's as Hugging Face stores them (its RoPE reads either order).
// It stores Gemma's RMSNorm weights as 1 + w, so they load as any other's.
// Mixtral is a llama with experts.
constexpr GgufArchitecture kArchitectures[] = {
    {"llama", false, false, false, false, false, true, false},
    {"qwen2", true, false, true, false, false, false, false},
    {"qwen3", false, true, true, false, false, false, false},
    {"phi3", false, false, true, true, false, false, false},
    {"gemma3", false, true, true, false, true, false, false},
    {"qwen3moe", false, true, true, false, false, true, false},
    {"olmoe", false, true, true, false, false, false, true},
    {"qwen2moe", true, false, true, false, false, false, false},
};

// Refuses a tensor the architecture does not compute with: a bias on any projection but q, k and
// v of an architecture with qkv_bias, or q and k norms outside qk_norm (llama.cpp's llama loads
// optional biases, so such files exist; ignoring them would compute another model).
void check_extra_tensors(const GgufFile& f, const GgufArchitecture& arch) {
  auto ends_with = [](const std::string& s, const char* tail) {
    const size_t n = std::strlen(tail);
    return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
  };
  for (const auto& [name, info] : f.contents().tensors) {
    const bool qkv_bias =
        ends_with(name, ".attn_q.bias") || ends_with(name, ".attn_k.bias") || ends_with(name, ".attn_v.bias");
    const bool qk_norm = ends_with(name, ".attn_q_norm.weight") || ends_with(name, ".attn_k_norm.weight");
    if ((ends_with(name, ".bias") && !(qkv_bias && arch.qkv_bias)) || (qk_norm && !arch.qk_norm))
      fail(f.path(), ": tensor '", name, "' is not part of a ", arch.name, " model as minfer runs it");
  }
}

// Gemma 3's declared differences (GgufArchitecture::gemma3), where llama.cpp's gemma3 loader finds them.
void read_gemma3(const GgufFile& f, const std::string& a, LlamaConfig* c) {
  c->post_norms = true;
  c->activation = GluActivation::gelu_tanh;
  c->embedding_scale = std::sqrt(static_cast<float>(c->dim));
  // note: GGUF does not store query_pre_attn_scalar. llama.cpp scales by 1 / sqrt(key_length), but
  // for the 27B model (62 layers) by 1 / sqrt(dim / heads), as Google's reference does.
  if (c->n_layers == 62 && c->n_heads > 0) c->attention_scale = 1.0f / std::sqrt(float(c->dim / c->n_heads));
  for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping"})
    if (f.number(a + key, false, 0.0) != 0.0) fail(f.path(), ": soft-capping (", a, key, ") is not supported");
  if (c->sliding_window == 0) return;
  c->rope_theta_sliding = f.number(a + "rope.freq_base_swa", false, 10000.0);
  const GgufValue* pattern = f.find(a + "attention.sliding_window_pattern");
  if (pattern != nullptr && pattern->type == GgufValue::Type::array) {
    if (int64_t(pattern->numbers.size()) != c->n_layers)
      fail(f.path(), ": ", a, "attention.sliding_window_pattern lists ", pattern->numbers.size(), " layers of ", c->n_layers);
    for (double slides : pattern->numbers) c->sliding_layers.push_back(slides != 0.0);
    return;
  }
  // n: layer l slides where l % n < n - 1; 0: every layer does (as llama.cpp's set_swa_pattern)
  const int64_t every = f.integer(a + "attention.sliding_window_pattern", false, 6);
  if (every < 0) fail(f.path(), ": ", a, "attention.sliding_window_pattern = ", every);
  for (int64_t l = 0; l < c->n_layers && l < LlamaConfig::kMaxLayers; ++l)
    c->sliding_layers.push_back(every == 0 || l % every < every - 1);
}

// A mixture of experts' counts, where llama.cpp's loader finds them, with its defaults where a key
// is absent: an expert's width feed_forward_length (Qwen's: that over the experts a token takes), a
// shared expert feed_forward_length wide where the file has its tensors. The routings llama.cpp
// has and minfer does not (a sigmoid gate, DeepSeek's dense leading layers and groups, scaled
// weights) are refused by name.
void read_experts(const GgufFile& f, const std::string& a, const GgufArchitecture& arch, LlamaConfig* c) {
  c->n_experts = f.integer(a + "expert_count", true, 0);
  c->n_experts_used = f.integer(a + "expert_used_count", true, 0);
  const bool qwen = std::string(arch.name) == "qwen2moe" || std::string(arch.name) == "qwen3moe";
  const int64_t width = qwen && c->n_experts_used > 0 ? c->hidden_dim / c->n_experts_used : c->hidden_dim;
  c->expert_hidden_dim = f.integer(a + "expert_feed_forward_length", false, width);
  c->shared_expert_hidden_dim =
      f.integer(a + "expert_shared_feed_forward_length", false, f.has_tensor("blk.0.ffn_gate_shexp.weight") ? c->hidden_dim : 0);
  c->normalize_expert_weights = arch.normalize_experts;
  if (f.integer(a + "expert_gating_func", false, 1) != 1)
    fail(f.path(), ": ", a, "expert_gating_func = ", f.integer(a + "expert_gating_func", false, 1),
         " (minfer routes by softmax, 1)");
  for (const char* key : {"leading_dense_block_count", "expert_group_count", "expert_shared_count"})
    if (f.integer(a + key, false, 0) > (std::string(key) == "expert_shared_count" ? 1 : 0))
      fail(f.path(), ": ", a, key, " = ", f.integer(a + key, false, 0), " is not supported");
  if (f.number(a + "expert_weights_scale", false, 1.0) != 1.0)
    fail(f.path(), ": ", a, "expert_weights_scale = ", f.number(a + "expert_weights_scale", false, 1.0), " is not supported");
}

const GgufArchitecture& find_architecture(const GgufFile& f) {
  const std::string arch = f.text("general.architecture", true, "");
  std::string names;
  for (const GgufArchitecture& a : kArchitectures) {
    if (arch == a.name) return a;
    names += (names.empty() ? "" : ", ") + std::string(a.name);
  }
  fail(f.path(), ": architecture '", arch, "' is not supported (minfer runs ", names, ")");
}

}  // namespace

LlamaConfig read_gguf_config(const GgufFile& f) {
  const GgufArchitecture& arch = find_architecture(f);
  const std::string a = std::string(arch.name) + ".";
  LlamaConfig c;
  c.qkv_bias = arch.qkv_bias;
  c.qk_norm = arch.qk_norm;
  c.dim = f.integer(a + "embedding_length", true, 0);
  c.hidden_dim = f.integer(a + "feed_forward_length", true, 0);
  c.n_layers = f.integer(a + "block_count", true, 0);
  c.n_heads = f.integer(a + "attention.head_count", true, 0);
  c.n_kv_heads = f.integer(a + "attention.head_count_kv", false, c.n_heads);
  c.n_ctx = f.integer(a + "context_length", true, 0);
  c.rms_eps = static_cast<float>(f.number(a + "attention.layer_norm_rms_epsilon", false, 1e-5));
  c.rope_theta = f.number(a + "rope.freq_base", false, 10000.0);
  const int64_t key_length = f.integer(a + "attention.key_length", false, 0);
  if (key_length > 0 && (c.n_heads <= 0 || c.dim % c.n_heads != 0 || key_length != c.dim / c.n_heads))
    c.head_size = key_length;
  if (f.integer(a + "attention.value_length", false, key_length) != key_length)
    fail(f.path(), ": keys and values of different widths are not supported");
  c.qk_norm_whole = arch.qk_norm_whole;
  if (f.integer(a + "expert_count", false, 0) > 0) read_experts(f, a, arch, &c);
  // A sliding window of W keys, in every layer or (Gemma 3) in the layers its pattern names; 0:
  // none, as llama.cpp's converter writes it for Phi-4.
  c.sliding_window = f.integer(a + "attention.sliding_window", false, 0);
  if (c.sliding_window < 0) fail(f.path(), ": ", a, "attention.sliding_window = ", c.sliding_window);
  if (arch.gemma3) read_gemma3(f, a, &c);
  const int64_t rope_dims = f.integer(a + "rope.dimension_count", false, 0);
  if (rope_dims > 0 && c.n_heads > 0 && rope_dims != c.head_dim())
    fail(f.path(), ": RoPE over ", rope_dims, " of a head's ", c.head_dim(), " dimensions (partial rotary) is not supported");
  const std::string scaling = f.text(a + "rope.scaling.type", false, "none");
  if (scaling == "linear") {
    c.rope_scaling.type = RopeScaling::Type::linear;
    c.rope_scaling.factor = f.number(a + "rope.scaling.factor", true, 1.0);
  } else if (scaling != "none") {
    fail(f.path(), ": rope scaling '", scaling, "' is not supported (minfer supports linear, and llama3 through rope_freqs)");
  }
  const Tensor embedding = f.view("token_embd.weight");
  c.vocab_size = f.integer(a + "vocab_size", false, embedding.size(0));
  c.shared_classifier = !f.has_tensor("output.weight");
  if (f.has_tensor("rope_factors_long.weight") || f.has_tensor("rope_factors_short.weight"))
    fail(f.path(), ": LongRoPE scaling (rope_factors_long, rope_factors_short) is not supported");
  if (f.has_tensor("rope_freqs.weight")) {
    const Tensor factors = f.view("rope_freqs.weight");
    if (factors.dtype() != DType::f32 || factors.ndim() != 1)
      fail(f.path(), ": rope_freqs.weight must be an F32 vector, it is ", factors.str());
    c.rope_scaling.type = RopeScaling::Type::factors;
    c.rope_scaling.factors.assign(factors.data_as<float>(), factors.data_as<float>() + factors.numel());
  }
  c.bos_id = static_cast<int32_t>(f.integer("tokenizer.ggml.bos_token_id", false, -1));
  c.stop_ids.clear();
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const int64_t id = f.integer(key, false, -1);
    if (id >= 0 && id <= INT32_MAX) c.stop_ids.push_back(static_cast<int32_t>(id));
  }
  c.validate(f.path());
  return c;
}

namespace {

std::vector<std::string> strings(const GgufFile& f, const std::string& key, bool required) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) {
    if (required) fail(f.path(), ": metadata '", key, "' is missing");
    return {};
  }
  if (v->type != GgufValue::Type::array || v->element != GgufValue::Type::string)
    fail(f.path(), ": metadata '", key, "' is not an array of strings");
  return v->strings;
}

std::vector<double> numbers(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return {};
  if (v->type != GgufValue::Type::array || v->element == GgufValue::Type::string)
    fail(f.path(), ": metadata '", key, "' is not an array of numbers");
  return v->numbers;
}

bool flag(const GgufFile& f, const std::string& key, bool fallback) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return fallback;
  if (v->type != GgufValue::Type::boolean) fail(f.path(), ": metadata '", key, "' is not a bool");
  return v->boolean;
}

// A layer of experts' tensors: the router blk.N.ffn_gate_inp (experts, dim), and
// ffn_{gate,up,down}_exps, (experts, f, dim) and (experts, dim, f), one matrix per expert; Qwen2-MoE's
// shared expert ffn_{gate,up,down}_shexp and its gate ffn_gate_inp_shexp (dim).
void read_expert_layer(const GgufFile& f, const std::string& p, const LlamaConfig& c, LlamaHostWeights::Layer* layer) {
  layer->router = f.view(p + "ffn_gate_inp.weight");
  const Tensor gate = f.view(p + "ffn_gate_exps.weight"), up = f.view(p + "ffn_up_exps.weight"),
               down = f.view(p + "ffn_down_exps.weight");
  for (const Tensor* t : {&gate, &up, &down})
    if (t->ndim() != 3 || t->size(0) != c.n_experts)
      fail(f.path(), ": ", p, "ffn_*_exps ", t->str(), " does not hold the config's ", c.n_experts, " experts");
  for (int64_t e = 0; e < c.n_experts; ++e) {
    layer->w1_experts.push_back(gate.select(0, e));
    layer->w3_experts.push_back(up.select(0, e));
    layer->w2_experts.push_back(down.select(0, e));
  }
  if (c.shared_expert_hidden_dim == 0) return;
  layer->w1 = f.view(p + "ffn_gate_shexp.weight");
  layer->w3 = f.view(p + "ffn_up_shexp.weight");
  layer->w2 = f.view(p + "ffn_down_shexp.weight");
  const Tensor shared_gate = f.view(p + "ffn_gate_inp_shexp.weight");
  layer->shared_gate = shared_gate.ndim() == 1 ? shared_gate.reshape({1, shared_gate.size(0)}) : shared_gate;
}

}  // namespace

LlamaHostWeights load_gguf_weights(const std::string& path) {
  auto file = std::make_shared<GgufFile>(path);
  LlamaHostWeights w;
  w.config = read_gguf_config(*file);
  w.rotate_half = find_architecture(*file).rotate_half;
  const bool fused = find_architecture(*file).fused;
  check_extra_tensors(*file, find_architecture(*file));
  const LlamaConfig& c = w.config;
  const int64_t q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim;
  w.owner = file;
  w.header_digest = file->header_digest();
  w.token_embedding = file->view("token_embd.weight");
  w.rms_final = file->view("output_norm.weight");
  w.classifier = c.shared_classifier ? w.token_embedding : file->view("output.weight");
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LlamaHostWeights::Layer& layer = w.layers[static_cast<size_t>(l)];
    layer.rms_att = file->view(p + "attn_norm.weight");
    if (fused) {  // Phi-3: q | k | v rows in attn_qkv, gate | up rows in ffn_up
      const Tensor qkv = file->view(p + "attn_qkv.weight"), gate_up = file->view(p + "ffn_up.weight");
      if (qkv.ndim() != 2 || qkv.size(0) != q + 2 * kv || gate_up.ndim() != 2 || gate_up.size(0) != 2 * h)
        fail(path, ": ", p, "attn_qkv ", qkv.str(), " or ffn_up ", gate_up.str(),
             " does not hold the config's q | k | v and gate | up rows");
      layer.wq = qkv.slice(0, 0, q);
      layer.wk = qkv.slice(0, q, q + kv);
      layer.wv = qkv.slice(0, q + kv, q + 2 * kv);
      layer.w1 = gate_up.slice(0, 0, h);
      layer.w3 = gate_up.slice(0, h, 2 * h);
    } else {
      layer.wq = file->view(p + "attn_q.weight");
      layer.wk = file->view(p + "attn_k.weight");
      layer.wv = file->view(p + "attn_v.weight");
      if (c.layer_has_experts(l)) {
        read_expert_layer(*file, p, c, &layer);
      } else {
        layer.w1 = file->view(p + "ffn_gate.weight");
        layer.w3 = file->view(p + "ffn_up.weight");
        layer.w2 = file->view(p + "ffn_down.weight");
      }
    }
    if (c.qkv_bias) {
      layer.bq = file->view(p + "attn_q.bias");
      layer.bk = file->view(p + "attn_k.bias");
      layer.bv = file->view(p + "attn_v.bias");
    }
    if (c.qk_norm) {
      layer.q_norm = file->view(p + "attn_q_norm.weight");
      layer.k_norm = file->view(p + "attn_k_norm.weight");
    }
    layer.wo = file->view(p + "attn_output.weight");
    layer.rms_ffn = file->view(p + "ffn_norm.weight");
    if (fused) layer.w2 = file->view(p + "ffn_down.weight");
    if (c.post_norms) {
      layer.post_att_norm = file->view(p + "post_attention_norm.weight");
      layer.post_ffn_norm = file->view(p + "post_ffw_norm.weight");
    }
  }
  w.release = [file](const Tensor& t) { file->drop(t); };
  w.validate(path);
  return w;
}

bool gguf_has_vocab(const std::string& path) {
  return GgufFile(path).find("tokenizer.ggml.tokens") != nullptr;
}

GgufVocab read_gguf_vocab(const std::string& path) { return read_gguf_vocab(GgufFile(path)); }

GgufVocab read_gguf_vocab(const GgufFile& f) {
  GgufVocab v;
  v.model = f.text("tokenizer.ggml.model", true, "");
  v.pre = f.text("tokenizer.ggml.pre", false, "default");
  v.tokens = strings(f, "tokenizer.ggml.tokens", true);
  for (double s : numbers(f, "tokenizer.ggml.scores")) v.scores.push_back(static_cast<float>(s));
  for (double t : numbers(f, "tokenizer.ggml.token_type")) {
    // (A float out of int32's range would make the conversion undefined.)
    if (!(t >= 0 && t <= 255 && t == std::floor(t)))
      fail(f.path(), ": metadata 'tokenizer.ggml.token_type' holds ", t, ", not a token type (0-255)");
    v.token_types.push_back(static_cast<int32_t>(t));
  }
  v.merges = strings(f, "tokenizer.ggml.merges", false);
  v.chat_template = f.text("tokenizer.chat_template", false, "");
  v.bos_id = static_cast<int32_t>(f.integer("tokenizer.ggml.bos_token_id", false, -1));
  v.eos_id = static_cast<int32_t>(f.integer("tokenizer.ggml.eos_token_id", false, -1));
  v.unknown_id = static_cast<int32_t>(f.integer("tokenizer.ggml.unknown_token_id", false, -1));
  v.padding_id = static_cast<int32_t>(f.integer("tokenizer.ggml.padding_token_id", false, -1));
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const int64_t id = f.integer(key, false, -1);
    if (id >= 0 && id <= INT32_MAX) v.eot_ids.push_back(static_cast<int32_t>(id));
  }
  // Where a key is absent, llama.cpp's defaults (src/llama-vocab.cpp): SentencePiece ("llama")
  // adds BOS and a space prefix; byte-level BPE ("gpt2") adds BOS for the Llama 3 family of
  // pre-tokenizers only, and never a space prefix.
  const bool spm = v.model == "llama";
  const bool llama3_family = v.pre == "llama3" || v.pre == "llama-v3" || v.pre == "llama-bpe";
  v.add_bos = flag(f, "tokenizer.ggml.add_bos_token", spm || llama3_family);
  v.add_eos = flag(f, "tokenizer.ggml.add_eos_token", false);
  v.add_space_prefix = flag(f, "tokenizer.ggml.add_space_prefix", spm);
  return v;
}

}  // namespace minfer
