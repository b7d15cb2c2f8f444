#include "model/llama_weights.h"

#include "core/error.h"

namespace minfer {

namespace {

void check_tensor(const std::string& source, const std::string& name, const Tensor& t,
                  const std::vector<int64_t>& shape) {
  if (!t.defined()) fail(source, ": the weights lack ", name);
  if (t.dtype() == DType::i32) fail(source, ": ", name, " is i32; weights must be of a float or quantized type");
  if (t.device() != DeviceKind::cpu || !t.is_contiguous()) fail(source, ": ", name, " is not a dense host tensor");
  if (t.shape() != shape) {
    std::string want;
    for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
    fail(source, ": ", name, " is ", t.str(), ", the config says [", want, "]");
  }
}

// A bias or a head's norm: a vector of `n` in f32, f16 or bf16 (reordered element by element under
// rotate-half, which a block of a quantized type would not allow).
void check_vector(const std::string& source, const std::string& name, const Tensor& t, int64_t n) {
  check_tensor(source, name, t, {n});
  if (is_quantized(t.dtype())) fail(source, ": ", name, " is ", dtype_name(t.dtype()), "; it must be f32, f16 or bf16");
}

// A layer of experts' matrices: n of `shape` each, all of one type.
void check_experts(const std::string& source, const std::string& name, const std::vector<Tensor>& experts, int64_t n,
                   const std::vector<int64_t>& shape) {
  if (int64_t(experts.size()) != n) fail(source, ": ", experts.size(), " experts' ", name, " for ", n, " experts");
  for (size_t e = 0; e < experts.size(); ++e) {
    check_tensor(source, "expert " + std::to_string(e) + "'s " + name, experts[e], shape);
    if (experts[e].dtype() != experts[0].dtype())
      fail(source, ": expert ", e, "'s ", name, " is ", dtype_name(experts[e].dtype()), ", expert 0's ",
           dtype_name(experts[0].dtype()), " (an expert matrix's experts share one type)");
  }
}

// A layer's feed-forward: dense, or experts (with a shared expert where the config has one).
void check_ffn(const std::string& source, const LlamaConfig& c, int64_t l, const LlamaHostWeights::Layer& w) {
  const std::string at = "layer " + std::to_string(l) + "'s ";
  const int64_t d = c.dim, h = c.ffn_hidden(l), E = c.n_experts, f = c.expert_hidden_dim;
  if (h > 0) {
    check_tensor(source, at + "w1 (gate)", w.w1, {h, d});
    check_tensor(source, at + "w2 (down)", w.w2, {d, h});
    check_tensor(source, at + "w3 (up)", w.w3, {h, d});
  } else if (w.w1.defined() || w.w2.defined() || w.w3.defined()) {
    fail(source, ": ", at, "experts have a shared expert the config does not declare");
  }
  if (!c.layer_has_experts(l)) {
    if (w.router.defined() || !w.w1_experts.empty() || !w.w2_experts.empty() || !w.w3_experts.empty())
      fail(source, ": ", at, "feed-forward has experts the config does not declare");
    return;
  }
  check_tensor(source, at + "router", w.router, {E, d});
  check_experts(source, at + "w1 (gate)", w.w1_experts, E, {f, d});
  check_experts(source, at + "w2 (down)", w.w2_experts, E, {d, f});
  check_experts(source, at + "w3 (up)", w.w3_experts, E, {f, d});
  if (c.shared_expert_hidden_dim > 0) check_tensor(source, at + "shared expert's gate", w.shared_gate, {1, d});
  else if (w.shared_gate.defined()) fail(source, ": ", at, "has a shared expert's gate the config does not declare");
}

}  // namespace

void LlamaHostWeights::validate(const std::string& source) const {
  const LlamaConfig& c = config;
  c.validate(source);
  const int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), V = c.vocab_size;
  check_tensor(source, "the token embedding", token_embedding, {V, d});
  check_tensor(source, "the classifier", classifier, {V, d});
  check_tensor(source, "the final norm", rms_final, {d});
  if (int64_t(layers.size()) != c.n_layers)
    fail(source, ": ", layers.size(), " layers of weights for a config of ", c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const Layer& w = layers[static_cast<size_t>(l)];
    const std::string at = "layer " + std::to_string(l) + "'s ";
    check_tensor(source, at + "attention norm", w.rms_att, {d});
    check_tensor(source, at + "wq", w.wq, {q, d});
    check_tensor(source, at + "wk", w.wk, {kv, d});
    check_tensor(source, at + "wv", w.wv, {kv, d});
    if (c.qkv_bias) {
      check_vector(source, at + "q bias", w.bq, q);
      check_vector(source, at + "k bias", w.bk, kv);
      check_vector(source, at + "v bias", w.bv, kv);
    } else if (w.bq.defined() || w.bk.defined() || w.bv.defined()) {
      fail(source, ": ", at, "attention has biases the config does not declare (qkv_bias)");
    }
    if (c.qk_norm) {
      check_vector(source, at + "q norm", w.q_norm, c.q_norm_dim());
      check_vector(source, at + "k norm", w.k_norm, c.k_norm_dim());
    } else if (w.q_norm.defined() || w.k_norm.defined()) {
      fail(source, ": ", at, "attention has q and k norms the config does not declare (qk_norm)");
    }
    check_tensor(source, at + "wo", w.wo, {d, q});
    if (c.post_norms) {
      check_tensor(source, at + "post-attention norm", w.post_att_norm, {d});
      check_tensor(source, at + "post-feed-forward norm", w.post_ffn_norm, {d});
    } else if (w.post_att_norm.defined() || w.post_ffn_norm.defined()) {
      fail(source, ": ", at, "has post norms the config does not declare (post_norms)");
    }
    check_tensor(source, at + "feed-forward norm", w.rms_ffn, {d});
    check_ffn(source, c, l, w);
  }
}

}  // namespace minfer
