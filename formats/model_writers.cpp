#include "formats/model_writers.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "formats/gguf.h"

namespace minfer {

namespace {

// A tensor's elements in `dtype` (from f32, f16 or bf16), rows optionally reordered:
// row r of the result is row order[r] of t.
std::vector<uint8_t> encode(const Tensor& t, DType dtype, const std::vector<int64_t>* order = nullptr) {
  const int64_t rows = t.ndim() == 1 ? 1 : t.size(0), cols = t.numel() / std::max<int64_t>(rows, 1);
  std::vector<float> wide(static_cast<size_t>(t.numel()));
  convert_to_f32(wide.data(), t.data(), t.dtype(), wide.size());
  if (order != nullptr) {
    std::vector<float> moved(wide.size());
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(&moved[size_t(r * cols)], &wide[size_t((*order)[size_t(r)] * cols)], size_t(cols) * sizeof(float));
    wide.swap(moved);
  }
  std::vector<uint8_t> out(static_cast<size_t>(dtype_bytes(dtype, wide.size())));
  convert_from_f32(out.data(), dtype, wide.data(), wide.size());
  return out;
}

// The rows of a q or k projection in Hugging Face's rotate-half order, from interleaved pairs:
// the inverse of LlamaModel's permutation (model/llama_weights.h).
std::vector<int64_t> rotate_half_order(int64_t heads, int64_t head_dim) {
  std::vector<int64_t> order(static_cast<size_t>(heads * head_dim));
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < half; ++j) order[size_t(h * head_dim + i * half + j)] = h * head_dim + 2 * j + i;
  return order;
}

const char* hf_dtype(DType d) { return d == DType::f32 ? "F32" : d == DType::f16 ? "F16" : "BF16"; }

void check_writable(const LlamaHostWeights& w, DType dtype) {
  MINFER_CHECK(dtype != DType::i32 && !is_k_quant(dtype),
               "weights are written as f32, f16, bf16 or (GGUF) q8_0, q4_0, q4_1, q5_0 or q5_1, not ", dtype_name(dtype));
  MINFER_CHECK(!w.rotate_half, "weights to write must be in interleaved RoPE order");
  const char* lost = w.config.family_feature();
  if (lost == nullptr && w.norm_weight_offset != 0.0f) lost = "norms stored as w for x (1 + w) (Gemma)";
  MINFER_CHECK(lost == nullptr, "the writers write Llama models; ", lost == nullptr ? "" : lost, " would be lost");
  w.validate("make-model");
}

// llama.cpp's llama_ftype: ALL_F32 0, MOSTLY_F16 1, Q4_0 2, Q4_1 3, Q8_0 7, Q5_0 8, Q5_1 9, BF16 32.
uint32_t llama_file_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return 0;
    case DType::f16: return 1;
    case DType::q4_0: return 2;
    case DType::q4_1: return 3;
    case DType::q8_0: return 7;
    case DType::q5_0: return 8;
    case DType::q5_1: return 9;
    case DType::bf16: return 32;
    default: fail("no llama.cpp file type for ", dtype_name(dtype), " files");
  }
}

struct Named {
  std::string name;
  Tensor tensor;
  DType dtype;
  const std::vector<int64_t>* order;
};

}  // namespace

void write_hf_folder(const std::string& folder, const LlamaHostWeights& w, DType dtype) {
  check_writable(w, dtype);
  MINFER_CHECK(!is_quantized(dtype), "a Hugging Face folder holds f32, f16 or bf16 weights; ", dtype_name(dtype),
               " goes into GGUF");
  const LlamaConfig& c = w.config;
  MINFER_CHECK(c.rope_scaling.type != RopeScaling::Type::factors,
               "per-frequency RoPE factors (GGUF's rope_freqs) have no Hugging Face config");
  if (::mkdir(folder.c_str(), 0777) != 0 && errno != EEXIST) fail(folder, ": cannot create: ", std::strerror(errno));
  nlohmann::ordered_json config = {
      {"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_act", "silu"},
      {"hidden_size", c.dim}, {"intermediate_size", c.hidden_dim}, {"num_hidden_layers", c.n_layers},
      {"num_attention_heads", c.n_heads}, {"num_key_value_heads", c.n_kv_heads}, {"head_dim", c.head_dim()},
      {"max_position_embeddings", c.n_ctx}, {"rms_norm_eps", c.rms_eps}, {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", c.shared_classifier}, {"vocab_size", c.vocab_size},
      {"torch_dtype", dtype == DType::f32 ? "float32" : dtype == DType::f16 ? "float16" : "bfloat16"},
      {"attention_bias", false}, {"mlp_bias", false}};
  const RopeScaling& r = c.rope_scaling;
  if (r.type == RopeScaling::Type::linear) config["rope_scaling"] = {{"rope_type", "linear"}, {"factor", r.factor}};
  else if (r.type == RopeScaling::Type::llama3)
    config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", r.factor}, {"low_freq_factor", r.low_freq_factor},
                              {"high_freq_factor", r.high_freq_factor},
                              {"original_max_position_embeddings", r.original_max_positions}};
  else config["rope_scaling"] = nullptr;
  if (c.bos_id >= 0) config["bos_token_id"] = c.bos_id;
  config["eos_token_id"] = c.stop_ids;
  write_file_atomic(folder + "/config.json", config.dump(2) + "\n");

  const std::vector<int64_t> q_order = rotate_half_order(c.n_heads, c.head_dim());
  const std::vector<int64_t> k_order = rotate_half_order(c.n_kv_heads, c.head_dim());
  std::vector<Named> tensors = {{"model.embed_tokens.weight", w.token_embedding, dtype, nullptr},
                                {"model.norm.weight", w.rms_final, DType::f32, nullptr}};
  if (!c.shared_classifier) tensors.push_back({"lm_head.weight", w.classifier, dtype, nullptr});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const auto& layer = w.layers[size_t(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    tensors.push_back({p + "input_layernorm.weight", layer.rms_att, DType::f32, nullptr});
    tensors.push_back({p + "self_attn.q_proj.weight", layer.wq, dtype, &q_order});
    tensors.push_back({p + "self_attn.k_proj.weight", layer.wk, dtype, &k_order});
    tensors.push_back({p + "self_attn.v_proj.weight", layer.wv, dtype, nullptr});
    tensors.push_back({p + "self_attn.o_proj.weight", layer.wo, dtype, nullptr});
    tensors.push_back({p + "post_attention_layernorm.weight", layer.rms_ffn, DType::f32, nullptr});
    tensors.push_back({p + "mlp.gate_proj.weight", layer.w1, dtype, nullptr});
    tensors.push_back({p + "mlp.up_proj.weight", layer.w3, dtype, nullptr});
    tensors.push_back({p + "mlp.down_proj.weight", layer.w2, dtype, nullptr});
  }
  nlohmann::ordered_json header = {{"__metadata__", {{"format", "pt"}}}};
  uint64_t offset = 0;
  for (const Named& t : tensors) {
    const uint64_t bytes = dtype_bytes(t.dtype, uint64_t(t.tensor.numel()));
    header[t.name] = {{"dtype", hf_dtype(t.dtype)}, {"shape", t.tensor.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  AtomicFile out(folder + "/model.safetensors", 8 + text.size() + offset);
  const uint64_t length = text.size();
  out.write(&length, 8);
  out.write(text);
  for (const Named& t : tensors) {
    const std::vector<uint8_t> bytes = encode(t.tensor, t.dtype, t.order);
    out.write(bytes.data(), bytes.size());
  }
  out.commit();
}

namespace {

// GGUF's metadata, written as the file format lays it out.
class GgufMetadata {
 public:
  void string(const std::string& key, const std::string& value) {
    header(key, 8);
    raw_string(value);
    ++count_;
  }
  void u32(const std::string& key, uint32_t value) { scalar(key, 4, value); }
  void i32(const std::string& key, int32_t value) { scalar(key, 5, value); }
  void f32(const std::string& key, float value) { scalar(key, 6, value); }
  void boolean(const std::string& key, bool value) { scalar(key, 7, uint8_t(value ? 1 : 0)); }
  void strings(const std::string& key, const std::vector<std::string>& values) {
    header(key, 9);
    append(uint32_t(8));
    append(uint64_t(values.size()));
    for (const auto& v : values) raw_string(v);
    ++count_;
  }
  template <class T>
  void numbers(const std::string& key, uint32_t type, const std::vector<T>& values) {
    header(key, 9);
    append(type);
    append(uint64_t(values.size()));
    for (T v : values) append(v);
    ++count_;
  }
  const std::string& bytes() const { return bytes_; }
  uint64_t count() const { return count_; }

 private:
  template <class T>
  void append(T v) {
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void raw_string(const std::string& s) {
    append(uint64_t(s.size()));
    bytes_ += s;
  }
  void header(const std::string& key, uint32_t type) {
    raw_string(key);
    append(type);
  }
  template <class T>
  void scalar(const std::string& key, uint32_t type, T value) {
    header(key, type);
    append(value);
    ++count_;
  }
  std::string bytes_;
  uint64_t count_ = 0;
};

}  // namespace

void write_gguf(const std::string& path, const LlamaHostWeights& w, DType dtype, const GgufVocab* vocab,
                const GgufLayout& layout) {
  check_writable(w, dtype);
  MINFER_CHECK(layout.alignment > 0 && (layout.alignment & (layout.alignment - 1)) == 0,
               "GGUF alignment ", layout.alignment, " is not a power of two");
  const LlamaConfig& c = w.config;
  const uint64_t alignment = layout.alignment;
  GgufMetadata m;
  m.string("general.architecture", "llama");
  m.string("general.name", layout.name);
  m.u32("general.alignment", layout.alignment);
  m.u32("general.file_type", llama_file_type(dtype));
  m.u32("llama.context_length", uint32_t(c.n_ctx));
  m.u32("llama.embedding_length", uint32_t(c.dim));
  m.u32("llama.feed_forward_length", uint32_t(c.hidden_dim));
  m.u32("llama.block_count", uint32_t(c.n_layers));
  m.u32("llama.attention.head_count", uint32_t(c.n_heads));
  m.u32("llama.attention.head_count_kv", uint32_t(c.n_kv_heads));
  m.u32("llama.rope.dimension_count", uint32_t(c.head_dim()));
  if (c.head_size > 0) {
    m.u32("llama.attention.key_length", uint32_t(c.head_dim()));
    m.u32("llama.attention.value_length", uint32_t(c.head_dim()));
  }
  m.f32("llama.attention.layer_norm_rms_epsilon", c.rms_eps);
  m.f32("llama.rope.freq_base", float(c.rope_theta));
  m.u32("llama.vocab_size", uint32_t(c.vocab_size));
  if (c.rope_scaling.type == RopeScaling::Type::linear) {
    m.string("llama.rope.scaling.type", "linear");
    m.f32("llama.rope.scaling.factor", float(c.rope_scaling.factor));
  }
  if (vocab != nullptr) {
    m.string("tokenizer.ggml.model", vocab->model);
    m.string("tokenizer.ggml.pre", vocab->pre);
    m.strings("tokenizer.ggml.tokens", vocab->tokens);
    if (!vocab->scores.empty()) m.numbers("tokenizer.ggml.scores", 6, vocab->scores);
    if (!vocab->token_types.empty()) m.numbers("tokenizer.ggml.token_type", 5, vocab->token_types);
    if (!vocab->merges.empty()) m.strings("tokenizer.ggml.merges", vocab->merges);
    if (vocab->bos_id >= 0) m.u32("tokenizer.ggml.bos_token_id", uint32_t(vocab->bos_id));
    if (vocab->eos_id >= 0) m.u32("tokenizer.ggml.eos_token_id", uint32_t(vocab->eos_id));
    if (vocab->unknown_id >= 0) m.u32("tokenizer.ggml.unknown_token_id", uint32_t(vocab->unknown_id));
    m.boolean("tokenizer.ggml.add_bos_token", vocab->add_bos);
    m.boolean("tokenizer.ggml.add_eos_token", vocab->add_eos);
    if (vocab->model == "llama") m.boolean("tokenizer.ggml.add_space_prefix", vocab->add_space_prefix);
  } else {
    if (c.bos_id >= 0) m.u32("tokenizer.ggml.bos_token_id", uint32_t(c.bos_id));
    if (!c.stop_ids.empty()) m.u32("tokenizer.ggml.eos_token_id", uint32_t(c.stop_ids.back()));
  }

  std::vector<Named> tensors = {{"token_embd.weight", w.token_embedding, dtype, nullptr},
                                {"output_norm.weight", w.rms_final, DType::f32, nullptr}};
  if (!c.shared_classifier) tensors.push_back({"output.weight", w.classifier, dtype, nullptr});
  Tensor factors;  // llama3 scaling, as llama.cpp's converter stores it
  std::vector<float> factor_values;
  if (c.rope_scaling.type == RopeScaling::Type::llama3 || c.rope_scaling.type == RopeScaling::Type::factors) {
    LlamaConfig plain = c;
    plain.rope_scaling = RopeScaling();
    const std::vector<float> base = plain.rope_inv_freq(), scaled = c.rope_inv_freq();
    for (size_t j = 0; j < base.size(); ++j) factor_values.push_back(base[j] / scaled[j]);
    factors = Tensor::wrap(factor_values.data(), {int64_t(factor_values.size())}, DType::f32, DeviceKind::cpu);
    tensors.push_back({"rope_freqs.weight", factors, DType::f32, nullptr});
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const auto& layer = w.layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    tensors.push_back({p + "attn_norm.weight", layer.rms_att, DType::f32, nullptr});
    tensors.push_back({p + "attn_q.weight", layer.wq, dtype, nullptr});
    tensors.push_back({p + "attn_k.weight", layer.wk, dtype, nullptr});
    tensors.push_back({p + "attn_v.weight", layer.wv, dtype, nullptr});
    tensors.push_back({p + "attn_output.weight", layer.wo, dtype, nullptr});
    tensors.push_back({p + "ffn_norm.weight", layer.rms_ffn, DType::f32, nullptr});
    tensors.push_back({p + "ffn_gate.weight", layer.w1, dtype, nullptr});
    tensors.push_back({p + "ffn_up.weight", layer.w3, dtype, nullptr});
    tensors.push_back({p + "ffn_down.weight", layer.w2, dtype, nullptr});
  }
  // A quantized matrix whose rows are not whole blocks is written in f16, as llama.cpp's
  // quantizer falls back (stories260K's ffn_down, 172 wide).
  for (Named& t : tensors) t.dtype = matrix_dtype(t.dtype, t.tensor.size(t.tensor.ndim() - 1));
  std::string infos;
  auto put = [&](const void* p, size_t n) { infos.append(static_cast<const char*>(p), n); };
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const Named& t : tensors) {
    const uint64_t size = t.name.size();
    put(&size, 8);
    infos += t.name;
    const uint32_t n_dims = uint32_t(t.tensor.ndim());
    put(&n_dims, 4);
    for (int d = t.tensor.ndim() - 1; d >= 0; --d) {  // ggml order: the fastest-varying first
      const uint64_t extent = uint64_t(t.tensor.size(d));
      put(&extent, 8);
    }
    const uint32_t type = ggml_type_of(t.dtype);
    put(&type, 4);
    put(&offset, 8);
    offsets.push_back(offset);
    offset += (dtype_bytes(t.dtype, uint64_t(t.tensor.numel())) + alignment - 1) / alignment * alignment;
  }
  std::string head;
  const uint32_t magic = 0x46554747u, version = 3;
  const uint64_t n_tensors = tensors.size(), n_keys = m.count();
  head.append(reinterpret_cast<const char*>(&magic), 4);
  head.append(reinterpret_cast<const char*>(&version), 4);
  head.append(reinterpret_cast<const char*>(&n_tensors), 8);
  head.append(reinterpret_cast<const char*>(&n_keys), 8);
  head += m.bytes();
  head += infos;
  head.append((alignment - head.size() % alignment) % alignment, '\0');
  AtomicFile out(path, head.size() + offset);
  out.write(head);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::vector<uint8_t> bytes = encode(tensors[i].tensor, tensors[i].dtype);
    out.write(bytes.data(), bytes.size());
    const std::string pad((alignment - bytes.size() % alignment) % alignment, '\0');
    out.write(pad);
  }
  out.commit();
}

}  // namespace minfer
