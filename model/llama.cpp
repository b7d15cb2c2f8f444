// The Llama forward pass, the same code for every backend and for prefill and decode alike.
//
// A batch is M rows (tokens); each row carries its sequence and its position. One layer:
//
//   xb  = rmsnorm(x) * rms_att                       attention block
//   qkv = xb Wqkv^T                                  q (q_dim) | k (kv_dim) | v (kv_dim) per row
//   q, k = rope(q, k)                                rotate pairs by the row's position
//   cache[seq, pos] = k, v                           the KV cache remembers this position
//   att = attention(q, cache)                        each row attends to positions 0..pos
//   x  += att Wo^T                                   residual
//   xb  = rmsnorm(x) * rms_ffn                       feed-forward block
//   h1 | h3 = xb W13^T
//   x  += (silu(h1) * h3) W2^T                       residual
//
// then, for the rows whose logits are wanted only: logits = rmsnorm(x) * rms_final Wcls^T.
//
// With fused kernels the same arithmetic runs in fewer passes over memory: Q, K and V come out of
// one product (and W1, W3 of another), RoPE and the cache write are one kernel, each residual
// add is folded into the RMSNorm that follows it, and decode attention is one pass with an
// online softmax. Both paths are tested to give the same tokens.
#include "model/llama.h"

#include "core/checked.h"
#include "core/error.h"
#include "kernels/ref/rope.h"

#include <cstring>

namespace minfer {

uint64_t LlamaModel::weight_bytes(const LlamaConfig& c, DType dtype) {
  const char* what = "model size";
  const uint64_t table = dtype_bytes(matrix_dtype(dtype, c.dim), checked_mul(uint64_t(c.vocab_size), uint64_t(c.dim), what));
  const uint64_t tables = c.shared_classifier ? table : checked_mul(table, 2, what);
  uint64_t norms = checked_add(checked_mul(2 * uint64_t(c.n_layers), uint64_t(c.dim), what),
                               uint64_t(c.dim), what);
  uint64_t rope = checked_mul(uint64_t(c.n_ctx), uint64_t(c.head_dim()), what);
  return checked_add(checked_add(c.layer_matrix_bytes(dtype), tables, what),
                     checked_mul(checked_add(norms, rope, what), 4, what), what);
}

void LlamaModel::allocate(const std::string& name) {
  const LlamaConfig& c = config_;
  const int64_t L = c.n_layers, d = c.dim, h = c.hidden_dim, q = c.q_dim(), kv = c.kv_dim(), V = c.vocab_size;
  // note: each matrix's dtype follows its input width (matrix_dtype: q8_0 needs rows of whole
  // 32-weight blocks, else f16, as llama.cpp falls back).
  w_.token_embedding = backend_.empty({V, d}, matrix_dtype(dtype_, d));
  w_.classifier = c.shared_classifier ? w_.token_embedding : backend_.empty({V, d}, matrix_dtype(dtype_, d));
  w_.rms_att = backend_.empty({L, d}, DType::f32);
  w_.rms_ffn = backend_.empty({L, d}, DType::f32);
  w_.rms_final = backend_.empty({d}, DType::f32);
  w_.wqkv = backend_.empty({L, q + 2 * kv, d}, matrix_dtype(dtype_, d));
  w_.wo = backend_.empty({L, d, q}, matrix_dtype(dtype_, q));
  w_.w13 = backend_.empty({L, 2 * h, d}, matrix_dtype(dtype_, d));
  w_.w2 = backend_.empty({L, d, h}, matrix_dtype(dtype_, h));
  const std::vector<float> inv_freq = c.rope_inv_freq();
  Tensor rope = backend_.empty_host({c.n_ctx, c.head_dim()}, DType::f32);
  ref::rope_table(rope.data_as<float>(), c.n_ctx, inv_freq.data(), c.head_dim());
  w_.rope = backend_.empty({c.n_ctx, c.head_dim()}, DType::f32);
  w_.rope.copy_from(rope);

  info_.name = name;
  info_.shape = c.describe();
  info_.vocab_size = V;
  info_.n_ctx = c.n_ctx;
  info_.n_layers = L;
  info_.n_kv_heads = c.n_kv_heads;
  info_.head_dim = c.head_dim();
  info_.n_params = c.n_params();
  info_.weight_bytes = weight_bytes(c, dtype_);
  info_.dtype = dtype_;
  info_.bos_id = c.bos_id;
  info_.stop_ids = c.stop_ids;
}

namespace {

// Copies a host tensor (f32, f16 or bf16) into a tensor of the backend of any of those dtypes,
// converting through a host staging buffer when the dtypes differ.
void upload(Backend& backend, const Tensor& dst, const Tensor& src) {
  MINFER_CHECK(dst.shape() == src.shape(), "upload: ", src.str(), " into ", dst.str());
  if (dst.dtype() == src.dtype()) {
    dst.copy_from(src);
    return;
  }
  Tensor staging = backend.empty_host(src.shape(), dst.dtype());
  if (src.dtype() == DType::f32 || dst.dtype() == DType::f32) {
    staging.convert_from(src);
  } else {  // f16 <-> bf16 through f32
    Tensor wide = backend.empty_host(src.shape(), DType::f32);
    wide.convert_from(src);
    staging.convert_from(wide);
  }
  dst.copy_from(staging);
}

// The rows of a q or k projection (heads * head_dim, in) reordered from Hugging Face's
// rotate-half pairs (j, j + head_dim / 2) to interleaved pairs (2j, 2j + 1); see
// model/llama_weights.h.
Tensor interleave_rope_rows(Backend& backend, const Tensor& w, int64_t heads, int64_t head_dim) {
  Tensor out = backend.empty_host(w.shape(), w.dtype());
  const int64_t half = head_dim / 2, row_bytes = w.size(1) * int64_t(w.element_size());
  const char* src = static_cast<const char*>(w.data());
  char* dst = static_cast<char*>(out.data());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < half; ++j)
      for (int64_t i = 0; i < 2; ++i)
        std::memcpy(dst + (h * head_dim + 2 * j + i) * row_bytes, src + (h * head_dim + i * half + j) * row_bytes,
                    static_cast<size_t>(row_bytes));
  return out;
}

}  // namespace

LlamaModel::LlamaModel(Backend& backend, const LlamaHostWeights& weights, const std::string& name,
                       const LlamaOptions& options)
    : backend_(backend), config_(weights.config), dtype_(options.dtype.value_or(weights.token_embedding.dtype())),
      kernels_(options.kernels) {
  weights.validate(name);
  allocate(name);
  const int64_t q = config_.q_dim(), h = config_.hidden_dim, kv = config_.kv_dim(), hd = config_.head_dim();
  // Each tensor is released (its file pages dropped) as soon as it is on the device.
  auto put = [&](const Tensor& dst, const Tensor& src) {
    upload(backend_, dst, src);
    if (weights.release) weights.release(src);
  };
  auto put_rope_rows = [&](const Tensor& dst, const Tensor& src, int64_t heads) {
    if (!weights.rotate_half) return put(dst, src);
    upload(backend_, dst, interleave_rope_rows(backend_, src, heads, hd));
    if (weights.release) weights.release(src);
  };
  put(w_.token_embedding, weights.token_embedding);
  if (!config_.shared_classifier) put(w_.classifier, weights.classifier);
  put(w_.rms_final, weights.rms_final);
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const LlamaHostWeights::Layer& src = weights.layers[static_cast<size_t>(l)];
    Tensor qkv = w_.wqkv.select(0, l), w13 = w_.w13.select(0, l);
    put(w_.rms_att.select(0, l), src.rms_att);
    put(w_.rms_ffn.select(0, l), src.rms_ffn);
    put_rope_rows(qkv.slice(0, 0, q), src.wq, config_.n_heads);
    put_rope_rows(qkv.slice(0, q, q + kv), src.wk, config_.n_kv_heads);
    put(qkv.slice(0, q + kv, q + 2 * kv), src.wv);
    put(w_.wo.select(0, l), src.wo);
    put(w13.slice(0, 0, h), src.w1);
    put(w13.slice(0, h, 2 * h), src.w3);
    put(w_.w2.select(0, l), src.w2);
  }
  backend_.synchronize();
}

LlamaModel::LlamaModel(Backend& backend, const LlamaConfig& config, const std::string& name,
                       const LlamaOptions& options)
    : backend_(backend), config_(config), dtype_(options.dtype.value_or(DType::f32)), kernels_(options.kernels) {
  config_.validate(name);
  allocate(name);
  const int64_t q = config_.q_dim(), h = config_.hidden_dim, kv = config_.kv_dim();
  auto fill = [&](const Tensor& t, WeightKind kind, int64_t layer) {
    WeightInit init = weight_init(config_, options.seed, kind, layer);
    backend_.fill_uniform(t, init.seed, init.lo, init.hi);
  };
  fill(w_.token_embedding, WeightKind::embedding, 0);
  if (!config_.shared_classifier) fill(w_.classifier, WeightKind::classifier, 0);
  fill(w_.rms_final, WeightKind::rms_final, 0);
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    Tensor qkv = w_.wqkv.select(0, l), w13 = w_.w13.select(0, l);
    fill(w_.rms_att.select(0, l), WeightKind::rms_att, l);
    fill(w_.rms_ffn.select(0, l), WeightKind::rms_ffn, l);
    fill(qkv.slice(0, 0, q), WeightKind::wq, l);
    fill(qkv.slice(0, q, q + kv), WeightKind::wk, l);
    fill(qkv.slice(0, q + kv, q + 2 * kv), WeightKind::wv, l);
    fill(w_.wo.select(0, l), WeightKind::wo, l);
    fill(w13.slice(0, 0, h), WeightKind::w1, l);
    fill(w13.slice(0, h, 2 * h), WeightKind::w3, l);
    fill(w_.w2.select(0, l), WeightKind::w2, l);
  }
  backend_.synchronize();
}

uint64_t LlamaModel::activation_bytes(int64_t max_rows, int64_t max_logit_rows) const {
  const uint64_t d = config_.dim, h = config_.hidden_dim, q = config_.q_dim(), kv = config_.kv_dim();
  const uint64_t per_row = 3 * d + 2 * q + 2 * kv + 3 * h;  // x, xb, qkv, att, proj, h13, hb (below)
  const char* what = "activations";
  return checked_add(checked_product({uint64_t(max_rows), per_row, 4}, what),
                     checked_product({uint64_t(max_logit_rows), 2 * d, 4}, what), what);
}

void LlamaModel::reserve(int64_t max_rows, int64_t max_logit_rows) {
  if (max_rows <= ws_.rows && max_logit_rows <= ws_.logit_rows) return;
  const int64_t rows = std::max(max_rows, ws_.rows), logit_rows = std::max(max_logit_rows, ws_.logit_rows);
  const int64_t d = config_.dim, h = config_.hidden_dim, q = config_.q_dim(), kv = config_.kv_dim();
  ws_ = Workspace();  // give the old buffers back to the pool first
  ++graph_epoch_;
  ws_.rows = rows;
  ws_.logit_rows = logit_rows;
  ws_.x = backend_.empty({rows, d}, DType::f32);
  ws_.xb = backend_.empty({rows, d}, DType::f32);
  ws_.qkv = backend_.empty({rows, q + 2 * kv}, DType::f32);
  ws_.att = backend_.empty({rows, q}, DType::f32);
  ws_.proj = backend_.empty({rows, d}, DType::f32);
  ws_.h13 = backend_.empty({rows, 2 * h}, DType::f32);
  ws_.hb = backend_.empty({rows, h}, DType::f32);
  ws_.last = backend_.empty({logit_rows, d}, DType::f32);
  ws_.last_norm = backend_.empty({logit_rows, d}, DType::f32);
}

// One layer's activations and weights for a batch of M rows.
struct LlamaModel::LayerViews {
  Tensor x, xb, qkv, q, k, v, att, proj, h13, gate, up, hb;  // activations (M, ...)
  Tensor rms_att, rms_ffn, wqkv, wo, w13, w2;                 // this layer's weights
  Tensor k_cache, v_cache;                                    // (n_seqs, n_kv_heads, n_ctx, head_dim)
};

LlamaModel::LayerViews LlamaModel::layer_views(int64_t l, int64_t M, const KvCache& cache) const {
  const int64_t qd = config_.q_dim(), h = config_.hidden_dim, kv = config_.kv_dim();
  LayerViews v;
  v.x = ws_.x.slice(0, 0, M);
  v.xb = ws_.xb.slice(0, 0, M);
  v.qkv = ws_.qkv.slice(0, 0, M);
  v.q = v.qkv.slice(1, 0, qd);
  v.k = v.qkv.slice(1, qd, qd + kv);
  v.v = v.qkv.slice(1, qd + kv, qd + 2 * kv);
  v.att = ws_.att.slice(0, 0, M);
  v.proj = ws_.proj.slice(0, 0, M);
  v.h13 = ws_.h13.slice(0, 0, M);
  v.gate = v.h13.slice(1, 0, h);
  v.up = v.h13.slice(1, h, 2 * h);
  v.hb = ws_.hb.slice(0, 0, M);
  v.rms_att = w_.rms_att.select(0, l);
  v.rms_ffn = w_.rms_ffn.select(0, l);
  v.wqkv = w_.wqkv.select(0, l);
  v.wo = w_.wo.select(0, l);
  v.w13 = w_.w13.select(0, l);
  v.w2 = w_.w2.select(0, l);
  v.k_cache = cache.k(l);
  v.v_cache = cache.v(l);
  return v;
}

// The layer op by op, as model/naive_llama.cpp does it for one row: the reference for the fused
// path below.
void LlamaModel::forward_layer_unfused(const LayerViews& v, const ForwardBatch& b) {
  const int64_t qd = config_.q_dim(), h = config_.hidden_dim, kv = config_.kv_dim(), hd = config_.head_dim();
  Backend& be = backend_;
  be.rmsnorm(v.xb, v.x, v.rms_att, config_.rms_eps);
  be.matmul(v.q, v.xb, v.wqkv.slice(0, 0, qd));
  be.matmul(v.k, v.xb, v.wqkv.slice(0, qd, qd + kv));
  be.matmul(v.v, v.xb, v.wqkv.slice(0, qd + kv, qd + 2 * kv));
  be.rope(v.q, b.pos, w_.rope, hd);
  be.rope(v.k, b.pos, w_.rope, hd);
  be.kv_store(v.k_cache, v.v_cache, v.k, v.v, b.seq, b.pos);
  be.attention(v.att, v.q, v.k_cache, v.v_cache, b.seq, b.pos, hd, AttentionAlgorithm::three_pass);
  be.matmul(v.proj, v.att, v.wo);
  be.add(v.x, v.x, v.proj);

  be.rmsnorm(v.xb, v.x, v.rms_ffn, config_.rms_eps);
  be.matmul(v.gate, v.xb, v.w13.slice(0, 0, h));
  be.matmul(v.up, v.xb, v.w13.slice(0, h, 2 * h));
  be.swiglu(v.hb, v.gate, v.up);
  be.matmul(v.proj, v.hb, v.w2);
  be.add(v.x, v.x, v.proj);
}

// The same arithmetic in fewer passes over memory: Q, K and V in one product (and the gate and up
// projections in another), RoPE fused with the cache write, attention in one pass with an online
// softmax, and each residual add folded into the RMSNorm that follows it. note: that last fusion
// crosses layers: the add that ends layer l also normalises x for layer l + 1, so layer l + 1
// finds xb ready and only layer 0 normalises its own input.
void LlamaModel::forward_layer_fused(int64_t l, const LayerViews& v, const ForwardBatch& b) {
  const float eps = config_.rms_eps;
  Backend& be = backend_;
  if (l == 0) be.rmsnorm(v.xb, v.x, v.rms_att, eps);
  be.matmul(v.qkv, v.xb, v.wqkv);
  be.rope_kv_store(v.k_cache, v.v_cache, v.q, v.k, v.v, b.seq, b.pos, w_.rope, config_.head_dim());
  be.attention(v.att, v.q, v.k_cache, v.v_cache, b.seq, b.pos, config_.head_dim(), AttentionAlgorithm::online_softmax);
  be.matmul(v.proj, v.att, v.wo);

  be.residual_rmsnorm(v.xb, v.x, v.proj, v.rms_ffn, eps);  // x += proj; xb = rmsnorm(x)
  be.matmul(v.h13, v.xb, v.w13);
  be.swiglu(v.hb, v.gate, v.up);
  be.matmul(v.proj, v.hb, v.w2);
  if (l + 1 < config_.n_layers)
    be.residual_rmsnorm(v.xb, v.x, v.proj, w_.rms_att.select(0, l + 1), eps);  // and the next layer's norm
  else
    be.add(v.x, v.x, v.proj);
}

void LlamaModel::forward(const ForwardBatch& b, const KvCache& cache, const Tensor& logits) {
  const int64_t M = b.tokens.size(0), R = b.logit_rows.size(0);
  MINFER_CHECK(M <= ws_.rows && R <= ws_.logit_rows, "forward: a batch of ", M, " rows (", R,
               " logit rows) exceeds the reserved ", ws_.rows, " (", ws_.logit_rows, ")");
  MINFER_CHECK(cache.n_layers() == config_.n_layers && cache.n_kv_heads() == config_.n_kv_heads &&
                   cache.head_dim() == config_.head_dim(),
               "forward: the KV cache does not match the model");
  Tensor x = ws_.x.slice(0, 0, M);
  backend_.embedding(x, w_.token_embedding, b.tokens);
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    TraceRange trace("layer");
    const LayerViews views = layer_views(l, M, cache);
    if (kernels_ == Kernels::fused) forward_layer_fused(l, views, b);
    else forward_layer_unfused(views, b);
  }
  if (R == 0) return;
  // Logits only where they are needed: gather those rows, normalise, classify.
  Tensor last = ws_.last.slice(0, 0, R), last_norm = ws_.last_norm.slice(0, 0, R);
  backend_.embedding(last, x, b.logit_rows);
  backend_.rmsnorm(last_norm, last, w_.rms_final, config_.rms_eps);
  backend_.matmul(logits, last_norm, w_.classifier);
}

}  // namespace minfer
