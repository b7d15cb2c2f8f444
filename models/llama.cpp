// The Llama forward pass, the same code for every backend and for prefill and decode alike.
//
// A batch is M rows (tokens); each row carries its sequence and its position. One layer:
//
//   xb  = rmsnorm(x) * rms_att                       attention block
//   qkv = xb Wqkv^T                                  q (dim) | k (kv_dim) | v (kv_dim) per row
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
#include "models/llama.h"

#include "core/checked.h"
#include "core/error.h"
#include "kernels/ref/rope.h"

namespace minfer {

constexpr float kRmsEps = 1e-5f;

uint64_t LlamaModel::weight_bytes(const LlamaConfig& c, DType dtype) {
  const char* what = "model size";
  uint64_t matrices = c.n_matmul_params();  // includes one (vocab, dim) matrix
  uint64_t tables = c.shared_classifier ? 0 : checked_mul(uint64_t(c.vocab_size), uint64_t(c.dim), what);
  uint64_t norms = checked_add(checked_mul(2 * uint64_t(c.n_layers), uint64_t(c.dim), what),
                               uint64_t(c.dim), what);
  uint64_t rope = checked_mul(uint64_t(c.n_ctx), uint64_t(c.head_dim()), what);
  return checked_add(checked_mul(checked_add(matrices, tables, what), uint64_t(dtype_size(dtype)), what),
                     checked_mul(checked_add(norms, rope, what), 4, what), what);
}

std::unique_ptr<LlamaModel> LlamaModel::load(const std::string& spec, Backend& backend,
                                             const LlamaOptions& options) {
  MINFER_CHECK(options.dtype != DType::i32, "weights must be f32, f16 or bf16");
  auto check_fits = [&](const LlamaConfig& c, const std::string& name) {
    uint64_t bytes = weight_bytes(c, options.dtype);
    size_t free_bytes = 0, total_bytes = 0;
    if (backend.pool().upstream().memory_info(&free_bytes, &total_bytes) && bytes > free_bytes)
      fail(name, " needs ", bytes, " bytes of ", dtype_name(options.dtype), " weights, ", free_bytes,
           " bytes are available on ", device_name(backend.device()), " (", total_bytes, " in all)");
  };
  if (spec.rfind("preset:", 0) == 0) {
    const Preset& preset = find_preset(spec.substr(7));
    check_fits(preset.config, spec);
    return std::make_unique<LlamaModel>(backend, preset.config, spec, options);
  }
  LlamaHostWeights weights = load_checkpoint(spec);
  check_fits(weights.config, spec);
  return std::make_unique<LlamaModel>(backend, weights, spec, options);
}

void LlamaModel::allocate(const std::string& name) {
  const LlamaConfig& c = config_;
  const int64_t L = c.n_layers, d = c.dim, h = c.hidden_dim, kv = c.kv_dim(), V = c.vocab_size;
  w_.token_embedding = backend_.empty({V, d}, dtype_);
  w_.classifier = c.shared_classifier ? w_.token_embedding : backend_.empty({V, d}, dtype_);
  w_.rms_att = backend_.empty({L, d}, DType::f32);
  w_.rms_ffn = backend_.empty({L, d}, DType::f32);
  w_.rms_final = backend_.empty({d}, DType::f32);
  w_.wqkv = backend_.empty({L, d + 2 * kv, d}, dtype_);
  w_.wo = backend_.empty({L, d, d}, dtype_);
  w_.w13 = backend_.empty({L, 2 * h, d}, dtype_);
  w_.w2 = backend_.empty({L, d, h}, dtype_);
  Tensor rope = backend_.empty_host({c.n_ctx, c.head_dim()}, DType::f32);
  ref::rope_table(rope.data_as<float>(), c.n_ctx, c.head_dim());
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
}

namespace {

// Copies a host f32 tensor into a device tensor of any float dtype, through a host staging
// buffer when a conversion or a device copy is needed.
void upload(Backend& backend, const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == DType::f32) {
    dst.copy_from(src);
    return;
  }
  Tensor staging = backend.empty_host(src.shape(), dst.dtype());
  staging.convert_from(src);
  dst.copy_from(staging);
}

}  // namespace

LlamaModel::LlamaModel(Backend& backend, const LlamaHostWeights& weights, const std::string& name,
                       const LlamaOptions& options)
    : backend_(backend), config_(weights.config), dtype_(options.dtype), fused_(options.fused) {
  allocate(name);
  const int64_t d = config_.dim, h = config_.hidden_dim, kv = config_.kv_dim();
  upload(backend_, w_.token_embedding, weights.token_embedding);
  if (!config_.shared_classifier) upload(backend_, w_.classifier, weights.classifier);
  w_.rms_att.copy_from(weights.rms_att);
  w_.rms_ffn.copy_from(weights.rms_ffn);
  w_.rms_final.copy_from(weights.rms_final);
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    Tensor qkv = w_.wqkv.select(0, l), w13 = w_.w13.select(0, l);
    upload(backend_, qkv.slice(0, 0, d), weights.wq.select(0, l));
    upload(backend_, qkv.slice(0, d, d + kv), weights.wk.select(0, l));
    upload(backend_, qkv.slice(0, d + kv, d + 2 * kv), weights.wv.select(0, l));
    upload(backend_, w_.wo.select(0, l), weights.wo.select(0, l));
    upload(backend_, w13.slice(0, 0, h), weights.w1.select(0, l));
    upload(backend_, w13.slice(0, h, 2 * h), weights.w3.select(0, l));
    upload(backend_, w_.w2.select(0, l), weights.w2.select(0, l));
  }
  backend_.synchronize();
}

LlamaModel::LlamaModel(Backend& backend, const LlamaConfig& config, const std::string& name,
                       const LlamaOptions& options)
    : backend_(backend), config_(config), dtype_(options.dtype), fused_(options.fused) {
  config_.validate(name);
  allocate(name);
  const int64_t d = config_.dim, h = config_.hidden_dim, kv = config_.kv_dim();
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
    fill(qkv.slice(0, 0, d), WeightKind::wq, l);
    fill(qkv.slice(0, d, d + kv), WeightKind::wk, l);
    fill(qkv.slice(0, d + kv, d + 2 * kv), WeightKind::wv, l);
    fill(w_.wo.select(0, l), WeightKind::wo, l);
    fill(w13.slice(0, 0, h), WeightKind::w1, l);
    fill(w13.slice(0, h, 2 * h), WeightKind::w3, l);
    fill(w_.w2.select(0, l), WeightKind::w2, l);
  }
  backend_.synchronize();
}

uint64_t LlamaModel::activation_bytes(int64_t max_rows, int64_t max_logit_rows) const {
  const uint64_t d = config_.dim, h = config_.hidden_dim, kv = config_.kv_dim();
  const uint64_t per_row = 5 * d + 2 * kv + 3 * h;  // x, xb, qkv, att, proj, h13, hb (below)
  const char* what = "activations";
  return checked_add(checked_product({uint64_t(max_rows), per_row, 4}, what),
                     checked_product({uint64_t(max_logit_rows), 2 * d, 4}, what), what);
}

void LlamaModel::reserve(int64_t max_rows, int64_t max_logit_rows) {
  if (max_rows <= ws_.rows && max_logit_rows <= ws_.logit_rows) return;
  const int64_t rows = std::max(max_rows, ws_.rows), logit_rows = std::max(max_logit_rows, ws_.logit_rows);
  const int64_t d = config_.dim, h = config_.hidden_dim, kv = config_.kv_dim();
  ws_ = Workspace();  // give the old buffers back to the pool first
  ++graph_epoch_;
  ws_.rows = rows;
  ws_.logit_rows = logit_rows;
  ws_.x = backend_.empty({rows, d}, DType::f32);
  ws_.xb = backend_.empty({rows, d}, DType::f32);
  ws_.qkv = backend_.empty({rows, d + 2 * kv}, DType::f32);
  ws_.att = backend_.empty({rows, d}, DType::f32);
  ws_.proj = backend_.empty({rows, d}, DType::f32);
  ws_.h13 = backend_.empty({rows, 2 * h}, DType::f32);
  ws_.hb = backend_.empty({rows, h}, DType::f32);
  ws_.last = backend_.empty({logit_rows, d}, DType::f32);
  ws_.last_norm = backend_.empty({logit_rows, d}, DType::f32);
}

void LlamaModel::forward_layer(int64_t l, int64_t M, const ForwardBatch& b, const KvCache& cache) {
  const int64_t d = config_.dim, h = config_.hidden_dim, kv = config_.kv_dim(), hd = config_.head_dim();
  Backend& be = backend_;
  Tensor x = ws_.x.slice(0, 0, M), xb = ws_.xb.slice(0, 0, M), qkv = ws_.qkv.slice(0, 0, M);
  Tensor q = qkv.slice(1, 0, d), k = qkv.slice(1, d, d + kv), v = qkv.slice(1, d + kv, d + 2 * kv);
  Tensor att = ws_.att.slice(0, 0, M), proj = ws_.proj.slice(0, 0, M);
  Tensor h13 = ws_.h13.slice(0, 0, M), hb = ws_.hb.slice(0, 0, M);
  Tensor wqkv = w_.wqkv.select(0, l), w13 = w_.w13.select(0, l);
  Tensor k_cache = cache.k(l), v_cache = cache.v(l);

  // Attention block. With fused kernels, xb already holds rmsnorm(x) (see the end of the layer).
  if (!fused_ || l == 0) be.rmsnorm(xb, x, w_.rms_att.select(0, l), kRmsEps);
  if (fused_) {
    be.matmul(qkv, xb, wqkv);
    be.rope_kv_store(k_cache, v_cache, q, k, v, b.seq, b.pos, w_.rope, hd);
  } else {
    be.matmul(q, xb, wqkv.slice(0, 0, d));
    be.matmul(k, xb, wqkv.slice(0, d, d + kv));
    be.matmul(v, xb, wqkv.slice(0, d + kv, d + 2 * kv));
    be.rope(q, b.pos, w_.rope, hd);
    be.rope(k, b.pos, w_.rope, hd);
    be.kv_store(k_cache, v_cache, k, v, b.seq, b.pos);
  }
  be.attention(att, q, k_cache, v_cache, b.seq, b.pos, hd,
               fused_ ? AttentionAlgorithm::online_softmax : AttentionAlgorithm::three_pass);
  be.matmul(proj, att, w_.wo.select(0, l));

  // Feed-forward block.
  if (fused_) {
    be.residual_rmsnorm(xb, x, proj, w_.rms_ffn.select(0, l), kRmsEps);
    be.matmul(h13, xb, w13);
  } else {
    be.add(x, x, proj);
    be.rmsnorm(xb, x, w_.rms_ffn.select(0, l), kRmsEps);
    be.matmul(h13.slice(1, 0, h), xb, w13.slice(0, 0, h));
    be.matmul(h13.slice(1, h, 2 * h), xb, w13.slice(0, h, 2 * h));
  }
  be.swiglu(hb, h13.slice(1, 0, h), h13.slice(1, h, 2 * h));
  be.matmul(proj, hb, w_.w2.select(0, l));
  // The residual add, fused with the next layer's first RMSNorm when there is a next layer.
  if (fused_ && l + 1 < config_.n_layers)
    be.residual_rmsnorm(xb, x, proj, w_.rms_att.select(0, l + 1), kRmsEps);
  else
    be.add(x, x, proj);
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
    forward_layer(l, M, b, cache);
  }
  if (R == 0) return;
  // Logits only where they are needed: gather those rows, normalise, classify.
  Tensor last = ws_.last.slice(0, 0, R), last_norm = ws_.last_norm.slice(0, 0, R);
  backend_.embedding(last, x, b.logit_rows);
  backend_.rmsnorm(last_norm, last, w_.rms_final, kRmsEps);
  backend_.matmul(logits, last_norm, w_.classifier);
}

}  // namespace minfer
