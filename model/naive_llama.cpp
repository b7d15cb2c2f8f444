// One token through a Llama decoder, as in run.c. Each step names the op that does it for a whole
// batch in LlamaModel::forward_layer_unfused (model/llama.cpp; forward_layer_fused does the same
// in fewer passes over memory) and the kernels behind that op:
//   ref   kernels/ref/OP.cpp     plain loops, the reference the op harness checks against
//   cpu   kernels/cpu/OP.cpp     Eigen and hand-written SIMD, over a thread pool
//   cuda  kernels/cuda/OP.cu     chosen by engine/cuda_choices.h, launched in engine/backend_cuda.cu
// note: the sums (dot products, RMSNorm's sum of squares) accumulate in double, and the RoPE
// frequencies and angles are computed in double, so that this page is the exact answer every
// kernel approximates; the values stored between steps are f32, as in run.c.
#include "model/naive_llama.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "engine/sampler.h"

namespace minfer {

namespace {

// A host tensor's values as f32 (from any float or quantized type: convert_to_f32).
std::vector<float> as_f32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert_to_f32(out.data(), t.data(), t.dtype(), out.size());
  return out;
}

// An RMSNorm's weights as f32, with Gemma's 1 added where its checkpoint stores w for x (1 + w)
// (LlamaHostWeights::norm_weight_offset).
std::vector<float> norm_f32(const Tensor& t, float offset) {
  std::vector<float> w = as_f32(t);
  for (float& v : w) v += offset;
  return w;
}

// RoPE frequencies in double from theta and the config's scaling, by Hugging Face's formulas
// (computed here again, not taken from LlamaConfig::rope_inv_freq, so that the tests compare two
// independent computations). Gemma 3's sliding layers use their own theta, unscaled.
std::vector<double> rope_frequencies(const LlamaConfig& c, double theta, const RopeScaling& r) {
  const int64_t hs = c.head_dim();
  std::vector<double> f(static_cast<size_t>(hs / 2));
  for (int64_t j = 0; j < hs / 2; ++j) {
    double x = 1.0 / std::pow(theta, double(2 * j) / double(hs));
    if (r.type == RopeScaling::Type::linear) x /= r.factor;
    if (r.type == RopeScaling::Type::factors) x /= r.factors[static_cast<size_t>(j)];
    if (r.type == RopeScaling::Type::llama3) {
      const double wavelen = 2.0 * M_PI / x, old = double(r.original_max_positions);
      if (wavelen > old / r.low_freq_factor) {
        x /= r.factor;
      } else if (wavelen >= old / r.high_freq_factor) {
        const double smooth = (old / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        x = (1.0 - smooth) * x / r.factor + smooth * x;
      }
    }
    f[static_cast<size_t>(j)] = x;
  }
  return f;
}

// out = x / rms(x) * weight. (Gemma computes x / rms(x) * (1 + w) and its Hugging Face checkpoints
// store w: the constructor adds the 1 to every norm's weights, norm_f32, so that this is the one
// RMSNorm; llama.cpp's converter stores 1 + w in GGUF files.)
//   forward_layer_*: be.rmsnorm (fused: be.residual_rmsnorm, the residual add folded in)
//   ref::rmsnorm, cpu::rmsnorm, cuda::rmsnorm (and residual_rmsnorm) in rmsnorm.{cpp,cu}
void rmsnorm(float* out,           // (n)
             const float* x,       // (n)
             const float* weight,  // (n)
             int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / double(n) + double(eps)));
  for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (scale * x[i]);
}

// out = w x. Nearly all of a token's time: every weight is read once per token, which is why
// decode is memory-bound (the `bytes` and `roofline` lessons).
//   forward_layer_*: be.matmul, with rows of many tokens at once (fused: Q, K, V in one product)
//   ref::matmul; cpu::matmul (f32/f16/bf16) and cpu::matmul_quant (GGUF blocks, matmul_quant.cpp);
//   cuda::matvec for decode's few rows, cuBLAS / cuBLASLt (gemm_cublas.cu) for prefill
void matmul(float* out,         // (n)
            const float* w,     // (n, k)
            const float* x,     // (k)
            int64_t n, int64_t k) {
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0.0;
    for (int64_t j = 0; j < k; ++j) sum += double(w[i * k + j]) * double(x[j]);
    out[i] = static_cast<float>(sum);
  }
}

// Rotates each head of `vec` by the angles of position `pos`: pairs (2j, 2j + 1), or (j, j +
// head_dim / 2) in Hugging Face's rotate-half order.
//   forward_layer_*: be.rope (fused: be.rope_kv_store, rotation and cache write in one kernel)
//   ref::rope, cpu::rope, cuda::rope (and rope_kv_store) in rope.{cpp,cu}; the angles come from a
//   (n_ctx, head_dim) table of (cos, sin) pairs made once (ref::rope_table)
void rope(float* vec,  // (n_heads, head_dim)
          int64_t n_heads, int64_t head_dim, int64_t pos, const std::vector<double>& inv_freq, bool rotate_half) {
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t j = 0; j < head_dim / 2; ++j) {
      const double angle = double(pos) * inv_freq[static_cast<size_t>(j)];
      const float cs = static_cast<float>(std::cos(angle)), sn = static_cast<float>(std::sin(angle));
      float* a = vec + h * head_dim + (rotate_half ? j : 2 * j);
      float* b = vec + h * head_dim + (rotate_half ? j + head_dim / 2 : 2 * j + 1);
      const float v0 = *a, v1 = *b;
      *a = v0 * cs - v1 * sn;
      *b = v0 * sn + v1 * cs;
    }
}

// out = act(gate) * up: SwiGLU, act = silu, or Gemma's GeGLU, act = GELU in its tanh form.
//   forward_layer_*: be.glu; ref::glu, cpu::glu, cuda::glu in glu.{cpp,cu} (a layer of experts:
//   on every slot's rows at once, the k experts of every row)
void glu(float* out,         // (n)
         const float* gate,  // (n)
         const float* up,    // (n)
         int64_t n, GluActivation activation) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    const double act = activation == GluActivation::silu
                           ? g / (1.0 + std::exp(-g))
                           : 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
    out[i] = static_cast<float>(act * double(up[i]));
  }
}

// x += delta: the residual stream.
//   forward_layer_*: be.add (fused: folded into the next be.residual_rmsnorm); ref::add, ...
void add(float* x, const float* delta, int64_t n) {  // x (n), delta (n)
  for (int64_t i = 0; i < n; ++i) x[i] += delta[i];
}

std::vector<std::vector<float>> experts_f32(const std::vector<Tensor>& experts) {
  std::vector<std::vector<float>> out;
  for (const Tensor& t : experts) out.push_back(as_f32(t));
  return out;
}

}  // namespace

NaiveLlama::NaiveLlama(const LlamaHostWeights& weights, int64_t n_ctx)
    : config_(weights.config), n_ctx_(n_ctx > 0 ? n_ctx : weights.config.n_ctx), rotate_half_(weights.rotate_half) {
  const LlamaConfig& c = config_;
  MINFER_CHECK(n_ctx_ <= c.n_ctx, "NaiveLlama: ", n_ctx_, " positions, the model has ", c.n_ctx);
  const float offset = weights.norm_weight_offset;
  embedding_ = as_f32(weights.token_embedding);
  classifier_ = as_f32(weights.classifier);
  rms_final_ = norm_f32(weights.rms_final, offset);
  for (const LlamaHostWeights::Layer& l : weights.layers) {
    layers_.push_back({});
    Layer& w = layers_.back();
    w.rms_att = norm_f32(l.rms_att, offset);
    w.wq = as_f32(l.wq);
    w.wk = as_f32(l.wk);
    w.wv = as_f32(l.wv);
    w.wo = as_f32(l.wo);
    w.rms_ffn = norm_f32(l.rms_ffn, offset);
    if (l.w1.defined()) {  // a layer of experts has none without a shared expert
      w.w1 = as_f32(l.w1);
      w.w2 = as_f32(l.w2);
      w.w3 = as_f32(l.w3);
    }
    if (l.router.defined()) {
      w.router = as_f32(l.router);
      w.w1_experts = experts_f32(l.w1_experts);
      w.w2_experts = experts_f32(l.w2_experts);
      w.w3_experts = experts_f32(l.w3_experts);
      if (l.shared_gate.defined()) w.shared_gate = as_f32(l.shared_gate);
    }
    if (c.qkv_bias) {
      layers_.back().bq = as_f32(l.bq);
      layers_.back().bk = as_f32(l.bk);
      layers_.back().bv = as_f32(l.bv);
    }
    if (c.qk_norm) {
      layers_.back().q_norm = norm_f32(l.q_norm, offset);
      layers_.back().k_norm = norm_f32(l.k_norm, offset);
    }
    if (c.post_norms) {
      layers_.back().post_att_norm = norm_f32(l.post_att_norm, offset);
      layers_.back().post_ffn_norm = norm_f32(l.post_ffn_norm, offset);
    }
  }
  inv_freq_ = rope_frequencies(c, c.rope_theta, c.rope_scaling);
  if (c.rope_theta_sliding > 0.0) inv_freq_sliding_ = rope_frequencies(c, c.rope_theta_sliding, RopeScaling());
  key_cache_.assign(static_cast<size_t>(c.n_layers * n_ctx_ * c.kv_dim()), 0.0f);
  value_cache_.assign(key_cache_.size(), 0.0f);
  x_.resize(static_cast<size_t>(c.dim));
  xb_.resize(static_cast<size_t>(c.dim));
  q_.resize(static_cast<size_t>(c.q_dim()));
  att_.resize(static_cast<size_t>(c.q_dim()));
  scores_.resize(static_cast<size_t>(n_ctx_));
  const int64_t hidden = std::max({c.hidden_dim, c.expert_hidden_dim, c.shared_expert_hidden_dim});
  hb_.resize(static_cast<size_t>(hidden));
  hb2_.resize(static_cast<size_t>(hidden));
  router_.resize(static_cast<size_t>(c.n_experts));
  expert_out_.resize(static_cast<size_t>(c.dim));
  logits_.resize(static_cast<size_t>(c.vocab_size));
}

// xb = rmsnorm(x); q, k, v = xb Wq, Wk, Wv (+ biases; then q, k normalised per head); rotate q,
// k; cache k, v at `pos`; each query head attends over positions 0..pos of its key/value head (the
// last W of them in a sliding layer); x += att Wo (normalised first where the model has post norms).
void NaiveLlama::attention_block(int64_t l, int64_t pos) {
  const LlamaConfig& c = config_;
  const Layer& w = layers_[static_cast<size_t>(l)];
  const int64_t dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), hs = c.head_dim();
  rmsnorm(xb_.data(), x_.data(), w.rms_att.data(), dim, c.rms_eps);

  // note: this cache is (n_ctx, kv_dim) for one sequence, as in run.c. The engine's serves many
  // sequences from one pool of blocks (of 64 positions, fewer for a short context), (n_blocks,
  // n_kv_heads, block_size, head_dim) per layer, and a block table per sequence names its blocks
  // (engine/kv_cache.h): within a block one head's positions lie together for attention to stream.
  // The server's continuous scheduler pages the pool: a sequence takes blocks as its positions reach
  // them, and two tables name the blocks of a shared prefix. Every other decoder (generate, bench,
  // chat, perplexity, speculative decoding, static batches) gives each sequence a whole context's
  // blocks, its own, in order.
  //   forward_layer_*: be.kv_store (fused: be.rope_kv_store); ref::kv_store, cpu::kv_store, cuda::kv_store
  float* layer_keys = &key_cache_[static_cast<size_t>(l * n_ctx_ * kv_dim)];      // (n_ctx, kv_dim)
  float* layer_values = &value_cache_[static_cast<size_t>(l * n_ctx_ * kv_dim)];  // (n_ctx, kv_dim)
  float* k = layer_keys + pos * kv_dim;                                           // (kv_dim)
  float* v = layer_values + pos * kv_dim;                                         // (kv_dim)
  matmul(q_.data(), w.wq.data(), xb_.data(), q_dim, dim);
  matmul(k, w.wk.data(), xb_.data(), kv_dim, dim);
  matmul(v, w.wv.data(), xb_.data(), kv_dim, dim);
  // Qwen2 adds a bias to each (config.qkv_bias).
  //   forward_layer_*: be.add with a row (fused: one add over q | k | v); ref::add, ...
  if (c.qkv_bias) {
    add(q_.data(), w.bq.data(), q_dim);
    add(k, w.bk.data(), kv_dim);
    add(v, w.bv.data(), kv_dim);
  }
  // Qwen3 and Gemma 3 normalise every head of q and k on its own (config.qk_norm), OLMoE the whole
  // of q and of k (config.qk_norm_whole): runs as wide as the norm's weights, each apart.
  //   forward_layer_*: one be.rmsnorm over all of q (and one over k), per head only because the
  //   weight is head_dim wide: rmsnorm normalises each run of its weight's width apart; ref::rmsnorm, ...
  if (c.qk_norm) {
    const int64_t qn = c.q_norm_dim(), kn = c.k_norm_dim();
    for (int64_t i = 0; i < q_dim; i += qn) rmsnorm(&q_[size_t(i)], &q_[size_t(i)], w.q_norm.data(), qn, c.rms_eps);
    for (int64_t i = 0; i < kv_dim; i += kn) rmsnorm(k + i, k + i, w.k_norm.data(), kn, c.rms_eps);
  }
  // Gemma 3's sliding layers rotate by their own frequencies (config.rope_theta_sliding).
  const bool sliding_rope = c.layer_uses_sliding_rope(l);
  rope(q_.data(), c.n_heads, hs, pos, sliding_rope ? inv_freq_sliding_ : inv_freq_, rotate_half_);
  rope(k, c.n_kv_heads, hs, pos, sliding_rope ? inv_freq_sliding_ : inv_freq_, rotate_half_);

  // Grouped-query attention: query heads h share key/value head h / (n_heads / n_kv_heads). A
  // sliding layer (Gemma 3's 5 in 6, Mistral v0.1's all) sees only the last W positions, and Gemma
  // scales the scores by query_pre_attn_scalar^-1/2 (config.attention_scale) instead of 1/sqrt(hs).
  //   forward_layer_*: be.attention, three passes (unfused) or one with an online softmax (fused);
  //   ref::attention (both algorithms); cpu::attention; cuda::attention_three_pass and
  //   attention_flash_decode (attention_decode.cu), attention_prefill_tiles (attention_prefill.cu)
  const int64_t group = c.n_heads / c.n_kv_heads;
  const float scale = c.attention_scale > 0.0f ? c.attention_scale : 1.0f / std::sqrt(float(hs));
  const int64_t first = c.layer_slides(l) ? std::max<int64_t>(0, pos - c.sliding_window + 1) : 0;
  for (int64_t h = 0; h < c.n_heads; ++h) {
    const float* query = &q_[static_cast<size_t>(h * hs)];  // (head_dim)
    const int64_t kv_head = h / group;
    for (int64_t t = first; t <= pos; ++t) {
      const float* key = layer_keys + t * kv_dim + kv_head * hs;  // (head_dim)
      double score = 0.0;
      for (int64_t i = 0; i < hs; ++i) score += double(query[i]) * double(key[i]);
      scores_[static_cast<size_t>(t - first)] = static_cast<float>(score) * scale;
    }
    softmax_in_place(scores_.data(), pos + 1 - first);  // run.c's softmax (engine/sampler.h)
    float* out = &att_[static_cast<size_t>(h * hs)];  // (head_dim)
    for (int64_t i = 0; i < hs; ++i) {
      double sum = 0.0;
      for (int64_t t = first; t <= pos; ++t)
        sum += double(scores_[static_cast<size_t>(t - first)]) * double(layer_values[t * kv_dim + kv_head * hs + i]);
      out[i] = static_cast<float>(sum);
    }
  }
  matmul(xb_.data(), w.wo.data(), att_.data(), dim, q_dim);
  // Split over ranks (model/tensor_split.h), each rank holds some heads and wo's columns for them,
  // so its xb here is a partial sum: the first of a layer's two all-reduces adds them up.
  //   forward_layer_*: sum_over_ranks(proj)
  // Gemma 3 normalises the block's output before the residual add (config.post_norms).
  //   forward_layer_*: be.rmsnorm in place
  if (c.post_norms) rmsnorm(xb_.data(), xb_.data(), w.post_att_norm.data(), dim, c.rms_eps);
  add(x_.data(), xb_.data(), dim);
}

// xb = rmsnorm(x); x += (act(xb W1) * xb W3) W2 (normalised first where the model has post norms),
// or in a layer of experts x += the experts' weighted sum (mixture_of_experts).
void NaiveLlama::feed_forward_block(int64_t l) {
  const LlamaConfig& c = config_;
  const Layer& w = layers_[static_cast<size_t>(l)];
  const int64_t dim = c.dim, hidden = c.hidden_dim;
  rmsnorm(xb_.data(), x_.data(), w.rms_ffn.data(), dim, c.rms_eps);
  if (c.layer_has_experts(l)) {
    mixture_of_experts(l);
  } else {
    matmul(hb_.data(), w.w1.data(), xb_.data(), hidden, dim);
    matmul(hb2_.data(), w.w3.data(), xb_.data(), hidden, dim);
    glu(hb_.data(), hb_.data(), hb2_.data(), hidden, c.activation);
    matmul(xb_.data(), w.w2.data(), hb_.data(), dim, hidden);
  }
  // Split over ranks, each holds some hidden units (of every expert) and w2's columns for them: the
  // second all-reduce adds up the partial sums.   forward_layer_*: sum_over_ranks(proj)
  if (c.post_norms) rmsnorm(xb_.data(), xb_.data(), w.post_ffn_norm.data(), dim, c.rms_eps);
  add(x_.data(), xb_.data(), dim);
}

// A mixture of experts (Qwen3-MoE, OLMoE, Mixtral, Qwen2-MoE): the router scores every expert for
// this token, the k = n_experts_used best each run a gated feed-forward layer of their own on xb,
// and xb becomes their outputs' sum weighted by the router's softmax. A token reads only its k
// experts' weights: that is why a mixture of experts decodes fast for its size, and why a batch,
// whose rows choose different experts, reads more of them.
void NaiveLlama::mixture_of_experts(int64_t l) {
  const LlamaConfig& c = config_;
  const Layer& w = layers_[static_cast<size_t>(l)];
  const int64_t dim = c.dim, E = c.n_experts, k = c.n_experts_used, f = c.expert_hidden_dim;
  // The router's logits.   forward_layer_*: be.matmul (one product of every row)
  matmul(router_.data(), w.router.data(), xb_.data(), E, dim);
  // The k best experts and their weights: softmax over all E, renormalised over the k where the
  // model says so (Qwen3-MoE's norm_topk_prob; Mixtral's softmax over its k is the same numbers).
  //   forward_layer_*: be.route_experts; ref::route_experts, cpu::route_experts, cuda::route_experts
  std::vector<int32_t> chosen(static_cast<size_t>(E));
  for (int32_t e = 0; e < E; ++e) chosen[static_cast<size_t>(e)] = e;
  std::partial_sort(chosen.begin(), chosen.begin() + k, chosen.end(), [&](int32_t a, int32_t b) {
    return router_[size_t(a)] > router_[size_t(b)] || (router_[size_t(a)] == router_[size_t(b)] && a < b);
  });
  chosen.resize(static_cast<size_t>(k));
  double all = 0.0, top = 0.0;
  for (int64_t e = 0; e < E; ++e) all += std::exp(double(router_[size_t(e)]) - double(router_[size_t(chosen[0])]));
  for (int32_t e : chosen) top += std::exp(double(router_[size_t(e)]) - double(router_[size_t(chosen[0])]));
  // Each chosen expert is a gated feed-forward layer; the outputs are summed by weight, in the
  // order the experts were chosen.
  //   forward_layer_*: be.matmul_experts for w1 and w3 (on the CPU each chosen expert's matrix read
  //   once for the rows that chose it), be.glu, be.matmul_experts for w2 with the weighted sum;
  //   ref::matmul_experts, cpu::matmul_experts (rows grouped by expert), cuda::matmul_experts
  std::vector<double> sum(static_cast<size_t>(dim), 0.0);
  for (int32_t e : chosen) {
    const double weight =
        std::exp(double(router_[size_t(e)]) - double(router_[size_t(chosen[0])])) / (c.normalize_expert_weights ? top : all);
    matmul(hb_.data(), w.w1_experts[size_t(e)].data(), xb_.data(), f, dim);
    matmul(hb2_.data(), w.w3_experts[size_t(e)].data(), xb_.data(), f, dim);
    glu(hb_.data(), hb_.data(), hb2_.data(), f, c.activation);
    matmul(expert_out_.data(), w.w2_experts[size_t(e)].data(), hb_.data(), dim, f);
    for (int64_t i = 0; i < dim; ++i) sum[size_t(i)] += weight * double(expert_out_[size_t(i)]);
  }
  // Qwen2-MoE's shared expert takes every token, scaled by sigmoid(xb . gate), and is added.
  //   forward_layer_*: be.matmul, be.glu, be.matmul, be.glu with a sigmoid gate of one column, be.add
  if (c.shared_expert_hidden_dim > 0) {
    const int64_t hs = c.shared_expert_hidden_dim;
    double gate = 0.0;
    for (int64_t i = 0; i < dim; ++i) gate += double(w.shared_gate[size_t(i)]) * double(xb_[size_t(i)]);
    matmul(hb_.data(), w.w1.data(), xb_.data(), hs, dim);
    matmul(hb2_.data(), w.w3.data(), xb_.data(), hs, dim);
    glu(hb_.data(), hb_.data(), hb2_.data(), hs, c.activation);
    matmul(expert_out_.data(), w.w2.data(), hb_.data(), dim, hs);
    const double scale = 1.0 / (1.0 + std::exp(-gate));
    for (int64_t i = 0; i < dim; ++i) sum[size_t(i)] += scale * double(expert_out_[size_t(i)]);
  }
  for (int64_t i = 0; i < dim; ++i) xb_[size_t(i)] = static_cast<float>(sum[size_t(i)]);
}

const std::vector<float>& NaiveLlama::forward(int32_t token, int64_t pos) {
  const LlamaConfig& c = config_;
  MINFER_CHECK(token >= 0 && token < c.vocab_size, "token ", token, " is outside the vocabulary of ", c.vocab_size);
  MINFER_CHECK(pos >= 0 && pos < n_ctx_, "position ", pos, " is outside the context of ", n_ctx_);
  // The token's row of the embedding table (multiplied by sqrt(dim) in Gemma: embedding_scale).
  //   LlamaModel::forward: be.gather_rows; ref::gather_rows, cpu::gather_rows, cuda::gather_rows
  for (int64_t i = 0; i < c.dim; ++i)
    x_[static_cast<size_t>(i)] = embedding_[static_cast<size_t>(token * c.dim + i)] * c.embedding_scale;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    attention_block(l, pos);
    feed_forward_block(l);
  }
  // The logits: LlamaModel::forward computes them only for the rows whose next token is wanted
  // (the last of each prompt), and engine/sampler.cpp picks the token.
  rmsnorm(xb_.data(), x_.data(), rms_final_.data(), c.dim, c.rms_eps);
  matmul(logits_.data(), classifier_.data(), xb_.data(), c.vocab_size, c.dim);
  return logits_;
}

}  // namespace minfer
