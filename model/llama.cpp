// The Llama forward pass, the same code for every backend and for prefill and decode alike.
//
// A batch is M rows (tokens); each row carries its sequence and its position. One layer:
//
//   x   = embedding[token] * embedding_scale         before the first layer (the scale: Gemma)
//
//   xb  = rmsnorm(x) * rms_att                       attention block
//   qkv = xb Wqkv^T (+ bqkv)                         q (q_dim) | k (kv_dim) | v (kv_dim) per row;
//                                                    the bias with qkv_bias only (Qwen2)
//   q, k = rmsnorm per head (q, k)                   with qk_norm only (Qwen3, Qwen3-MoE, Gemma 3;
//                                                    OLMoE: over the whole of q and of k)
//   q, k = rope(q, k)                                rotate pairs by the row's position (a
//                                                    sliding layer by its own table: Gemma 3)
//   cache[seq, pos] = k, v                           the KV cache remembers this position
//   att = attention(q, cache)                        each row attends to positions 0..pos, or
//                                                    pos - W + 1..pos in a sliding layer
//   o   = att Wo^T (then rmsnorm(o) * rms_post_att)  the post norm with post_norms only (Gemma 3)
//   x  += o                                          residual
//   xb  = rmsnorm(x) * rms_ffn                       feed-forward block
//   h1 | h3 = xb W13^T
//   f   = (act(h1) * h3) W2^T                        act: silu, or tanh-GELU (Gemma); in a layer
//                                                    of experts f = the k chosen experts' such
//                                                    outputs summed by the router's weights
//                                                    (feed_forward_experts)
//   x  += f (or rmsnorm(f) * rms_post_ffn)           residual
//
// then, for the rows whose logits are wanted only: logits = rmsnorm(x) * rms_final Wcls^T.
//
// With fused kernels the same arithmetic runs in fewer passes over memory: Q, K and V come out of
// one product (and W1, W3 of another), RoPE and the cache write are one kernel, each residual
// add is folded into the RMSNorm that follows it, and decode attention is one pass with an
// online softmax. Both paths are tested to give the same tokens. How the weights are stored,
// uploaded and packed: model/llama_storage.cpp.
#include "model/llama.h"

#include "core/checked.h"
#include "core/error.h"
#include "engine/op_checks.h"

#include <algorithm>
#include <array>

namespace minfer {

int64_t RowBlocks::rows() const {
  int64_t n = 0;
  for (const Tensor& p : parts) n += p.size(0);
  return n;
}

namespace {

// Calls fn(piece, offset) for each part that rows [begin, end) of `w` cross: piece is the part's
// rows among them, offset their first row counted from `begin`.
template <class Fn>
void for_each_piece(const RowBlocks& w, int64_t begin, int64_t end, Fn&& fn) {
  int64_t first = 0;  // of the part
  for (const Tensor& p : w.parts) {
    const int64_t lo = std::max(begin, first), hi = std::min(end, first + p.size(0));
    if (lo < hi) fn(p.slice(0, lo - first, hi - first), lo - begin);
    first += p.size(0);
  }
}

}  // namespace

RowBlocks RowBlocks::slice(int64_t begin, int64_t end) const {
  RowBlocks out;
  for_each_piece(*this, begin, end, [&](const Tensor& piece, int64_t) { out.parts.push_back(piece); });
  return out;
}

const Tensor& RowBlocks::tensor() const {
  MINFER_CHECK(parts.size() == 1, "a matrix in ", parts.size(), " parts is not one tensor");
  return parts[0];
}

void matmul(Backend& backend, const Tensor& out, const Tensor& x, const RowBlocks& w, int64_t begin, int64_t end) {
  if (end < 0) end = w.rows();
  if (w.parts.size() == 1 && begin == 0 && end == w.parts[0].size(0)) return backend.matmul(out, x, w.parts[0]);
  for_each_piece(w, begin, end, [&](const Tensor& piece, int64_t offset) {
    backend.matmul(out.slice(1, offset, offset + piece.size(0)), x, piece);
  });
}

std::array<LlamaModel::WorkspaceBuffer, 17> LlamaModel::workspace_buffers() const {
  const LlamaConfig& c = config_;
  const int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim();
  int64_t h = 0;  // the widest dense feed-forward of a layer
  for (int64_t l = 0; l < c.n_layers; ++l) h = std::max(h, c.ffn_hidden(l));
  const int64_t k = c.n_experts_used, f = c.expert_hidden_dim;
  return {{{&Workspace::x, false, d},
           {&Workspace::xb, false, d},
           {&Workspace::qkv, false, q + 2 * kv},
           {&Workspace::att, false, q},
           {&Workspace::proj, false, d},
           {&Workspace::h13, false, 2 * h},
           {&Workspace::hb, false, h},
           {&Workspace::last, true, d},
           {&Workspace::last_norm, true, d},
           {&Workspace::router, false, c.n_experts > 0 ? c.router_rows() : 0},
           {&Workspace::expert_weights, false, k},
           {&Workspace::h13_slots, false, 2 * k * f},
           {&Workspace::hb_slots, false, k * f},
           {&Workspace::shared, false, c.shared_expert_hidden_dim > 0 ? d : 0},
           {&Workspace::expert_ids, false, k, DType::i32},
           {&Workspace::logits_part, true, comm_ != nullptr ? split_.vocab.size() : 0},
           {&Workspace::logits_gathered, true, comm_ != nullptr ? c.vocab_size : 0}}};
}

uint64_t LlamaModel::activation_bytes(int64_t max_rows, int64_t max_logit_rows) const {
  const char* what = "activations";
  uint64_t bytes = 0;
  for (const WorkspaceBuffer& b : workspace_buffers()) {
    const int64_t rows = b.per_logit_row ? max_logit_rows : max_rows;
    bytes = checked_add(bytes, checked_product({uint64_t(rows), uint64_t(b.columns), dtype_bytes(b.dtype, 1)}, what), what);
  }
  return bytes;
}

void LlamaModel::reserve(int64_t max_rows, int64_t max_logit_rows) {
  if (max_rows <= ws_.rows && max_logit_rows <= ws_.logit_rows) return;
  const int64_t rows = std::max(max_rows, ws_.rows), logit_rows = std::max(max_logit_rows, ws_.logit_rows);
  ws_ = Workspace();  // give the old buffers back to the pool first
  ++graph_epoch_;
  ws_.rows = rows;
  ws_.logit_rows = logit_rows;
  for (const WorkspaceBuffer& b : workspace_buffers())
    ws_.*b.member = backend_.empty({b.per_logit_row ? logit_rows : rows, b.columns}, b.dtype);
}

// One layer's activations and weights for a batch of M rows.
struct LlamaModel::LayerViews {
  Tensor x, xb, qkv, q, k, v, att, proj, h13, gate, up, hb;  // activations (M, ...)
  bool experts = false;                                       // a layer of experts; then:
  Tensor router, expert_ids, expert_weights, shared;          // (M, ...)
  Tensor gate_slots, up_slots, hb_slots;                      // (M k, ...)
  Tensor rms_att, rms_ffn;                                    // this layer's weights
  Tensor bqkv, bq, bk, bv;                                    // and biases (qkv_bias only)
  Tensor q_norm, k_norm;                                      // and q, k norms (qk_norm only)
  Tensor rms_post_att, rms_post_ffn;                          // and post norms (post_norms only)
  Tensor rope;                                                // this layer's RoPE table
  AttentionSpec attention;                                    // its scale and window
  const Layer* w = nullptr;                                   // (a pointer: no copy per step)
  Tensor k_cache, v_cache;                                    // (n_blocks, n_kv_heads, block_size, head_dim)
  Tensor block_table;                                         // (n_seqs, blocks per sequence)
};

LlamaModel::LayerViews LlamaModel::layer_views(int64_t l, int64_t M, const KvCache& cache) const {
  const int64_t qd = config_.q_dim(), h = config_.ffn_hidden(l), kv = config_.kv_dim();
  LayerViews v;
  v.x = ws_.x.slice(0, 0, M);
  v.xb = ws_.xb.slice(0, 0, M);
  v.qkv = ws_.qkv.slice(0, 0, M);
  v.q = v.qkv.slice(1, 0, qd);
  v.k = v.qkv.slice(1, qd, qd + kv);
  v.v = v.qkv.slice(1, qd + kv, qd + 2 * kv);
  v.att = ws_.att.slice(0, 0, M);
  v.proj = ws_.proj.slice(0, 0, M);
  v.h13 = ws_.h13.slice(0, 0, M).slice(1, 0, 2 * h);
  v.gate = v.h13.slice(1, 0, h);
  v.up = v.h13.slice(1, h, 2 * h);
  v.hb = ws_.hb.slice(0, 0, M).slice(1, 0, h);
  v.experts = config_.layer_has_experts(l);
  if (v.experts) {
    const int64_t k = config_.n_experts_used, f = config_.expert_hidden_dim;
    v.router = ws_.router.slice(0, 0, M);
    v.expert_ids = ws_.expert_ids.slice(0, 0, M);
    v.expert_weights = ws_.expert_weights.slice(0, 0, M);
    const Tensor h13_slots = ws_.h13_slots.slice(0, 0, M).reshape({M * k, 2 * f});
    v.gate_slots = h13_slots.slice(1, 0, f);
    v.up_slots = h13_slots.slice(1, f, 2 * f);
    v.hb_slots = ws_.hb_slots.slice(0, 0, M).reshape({M * k, f});
    if (config_.shared_expert_hidden_dim > 0) v.shared = ws_.shared.slice(0, 0, M);
  }
  v.rms_att = w_.rms_att.select(0, l);
  v.rms_ffn = w_.rms_ffn.select(0, l);
  if (config_.qkv_bias) {
    v.bqkv = w_.bqkv.select(0, l);
    v.bq = v.bqkv.slice(0, 0, qd);
    v.bk = v.bqkv.slice(0, qd, qd + kv);
    v.bv = v.bqkv.slice(0, qd + kv, qd + 2 * kv);
  }
  if (config_.qk_norm) {
    v.q_norm = w_.q_norm.select(0, l);
    v.k_norm = w_.k_norm.select(0, l);
  }
  if (config_.post_norms) {
    v.rms_post_att = w_.rms_post_att.select(0, l);
    v.rms_post_ffn = w_.rms_post_ffn.select(0, l);
  }
  v.rope = config_.layer_uses_sliding_rope(l) ? w_.rope_sliding : w_.rope;
  v.attention = config_.attention_spec(l);
  v.w = &w_.layers[static_cast<size_t>(l)];
  v.k_cache = cache.k(l);
  v.v_cache = cache.v(l);
  v.block_table = cache.block_table();
  return v;
}

// The layer op by op, as model/naive_llama.cpp does it for one row: the reference for the fused
// path below.
void LlamaModel::forward_layer_unfused(const LayerViews& v, const ForwardBatch& b) {
  const int64_t qd = config_.q_dim(), kv = config_.kv_dim(), hd = config_.head_dim();
  Backend& be = backend_;
  be.rmsnorm(v.xb, v.x, v.rms_att, config_.rms_eps);
  matmul(be, v.q, v.xb, v.w->wqkv, 0, qd);
  matmul(be, v.k, v.xb, v.w->wqkv, qd, qd + kv);
  matmul(be, v.v, v.xb, v.w->wqkv, qd + kv, qd + 2 * kv);
  if (config_.qkv_bias) {
    be.add(v.q, v.q, v.bq);
    be.add(v.k, v.k, v.bk);
    be.add(v.v, v.v, v.bv);
  }
  // note: per head only because q_norm and k_norm are head_dim wide: rmsnorm normalises each run of
  // its weight's width on its own (engine/backend.h), so q's row is n_heads runs and k's n_kv_heads;
  // OLMoE's are q_dim and kv_dim wide (qk_norm_whole), one run a row.
  if (config_.qk_norm) {
    be.rmsnorm(v.q, v.q, v.q_norm, config_.rms_eps);
    be.rmsnorm(v.k, v.k, v.k_norm, config_.rms_eps);
  }
  be.rope(v.q, b.pos, v.rope, hd);
  be.rope(v.k, b.pos, v.rope, hd);
  be.kv_store(v.k_cache, v.v_cache, v.block_table, v.k, v.v, b.seq, b.pos);
  // note: the attention algorithm comes with the kernel set, three passes here and the online
  // softmax in forward_layer_fused: `--kernels` picks both, and no flag picks the algorithm alone.
  be.attention(v.att, v.q, v.k_cache, v.v_cache, v.block_table, b.seq, b.pos, v.attention,
               AttentionAlgorithm::three_pass);
  matmul(be, v.proj, v.att, v.w->wo);
  sum_over_ranks(v.proj);  // tensor parallel: wo's partial sums
  if (config_.post_norms) be.rmsnorm(v.proj, v.proj, v.rms_post_att, config_.rms_eps);
  be.add(v.x, v.x, v.proj);

  be.rmsnorm(v.xb, v.x, v.rms_ffn, config_.rms_eps);
  if (v.experts) {
    feed_forward_experts(v);
  } else {
    const int64_t h = v.gate.size(1);
    matmul(be, v.gate, v.xb, v.w->w13, 0, h);
    matmul(be, v.up, v.xb, v.w->w13, h, 2 * h);
    be.glu(v.hb, v.gate, v.up, config_.activation);
    matmul(be, v.proj, v.hb, v.w->w2);
  }
  sum_over_ranks(v.proj);  // tensor parallel: w2's partial sums
  if (config_.post_norms) be.rmsnorm(v.proj, v.proj, v.rms_post_ffn, config_.rms_eps);
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
  matmul(be, v.qkv, v.xb, v.w->wqkv);
  if (config_.qkv_bias) be.add(v.qkv, v.qkv, v.bqkv);
  // Per head only because q_norm and k_norm are head_dim wide, over the whole projection where they
  // are as wide as it (OLMoE; rmsnorm's runs: forward_layer_unfused).
  if (config_.qk_norm) {
    be.rmsnorm(v.q, v.q, v.q_norm, eps);
    be.rmsnorm(v.k, v.k, v.k_norm, eps);
  }
  be.rope_kv_store(v.k_cache, v.v_cache, v.block_table, v.q, v.k, v.v, b.seq, b.pos, v.rope, config_.head_dim());
  // The online softmax, chosen with the fused set (`--kernels fused`; forward_layer_unfused's note).
  be.attention(v.att, v.q, v.k_cache, v.v_cache, v.block_table, b.seq, b.pos, v.attention,
               AttentionAlgorithm::online_softmax);
  matmul(be, v.proj, v.att, v.w->wo);
  sum_over_ranks(v.proj);  // tensor parallel: wo's partial sums
  if (config_.post_norms) be.rmsnorm(v.proj, v.proj, v.rms_post_att, eps);

  be.residual_rmsnorm(v.xb, v.x, v.proj, v.rms_ffn, eps);  // x += proj; xb = rmsnorm(x)
  if (v.experts) {
    feed_forward_experts(v);
  } else {
    matmul(be, v.h13, v.xb, v.w->w13);
    be.glu(v.hb, v.gate, v.up, config_.activation);
    matmul(be, v.proj, v.hb, v.w->w2);
  }
  sum_over_ranks(v.proj);  // tensor parallel: w2's partial sums
  if (config_.post_norms) be.rmsnorm(v.proj, v.proj, v.rms_post_ffn, eps);
  if (l + 1 < config_.n_layers)
    be.residual_rmsnorm(v.xb, v.x, v.proj, w_.rms_att.select(0, l + 1), eps);  // and the next layer's norm
  else
    be.add(v.x, v.x, v.proj);
}

// A layer of experts' feed-forward, as model/naive_llama.cpp routes one row: the router scores
// every expert (one product, whose last column is the shared expert's gate where there is one),
// each row's k best experts each compute a gated feed-forward of it, and their outputs are summed
// by the router's weights; the shared expert's output, scaled by sigmoid of its gate, is added.
void LlamaModel::feed_forward_experts(const LayerViews& v) {
  const LlamaConfig& c = config_;
  Backend& be = backend_;
  const int64_t E = c.n_experts;
  be.matmul(v.router, v.xb, v.w->router);
  be.route_experts(v.expert_ids, v.expert_weights, v.router.slice(1, 0, E), c.normalize_expert_weights);
  if (counting_experts_) tally_expert_reads(v);
  be.matmul_experts(v.gate_slots, v.xb, v.w->w1_experts, v.expert_ids, Tensor());
  be.matmul_experts(v.up_slots, v.xb, v.w->w3_experts, v.expert_ids, Tensor());
  be.glu(v.hb_slots, v.gate_slots, v.up_slots, c.activation);
  be.matmul_experts(v.proj, v.hb_slots, v.w->w2_experts, v.expert_ids, v.expert_weights);
  if (c.shared_expert_hidden_dim == 0) return;
  matmul(be, v.h13, v.xb, v.w->w13);
  be.glu(v.hb, v.gate, v.up, c.activation);
  matmul(be, v.shared, v.hb, v.w->w2);
  be.glu(v.shared, v.router.slice(1, E, E + 1), v.shared, GluActivation::sigmoid);  // sigmoid(x . gate) * shared
  be.add(v.proj, v.proj, v.shared);
}

void LlamaModel::count_expert_reads(bool on) {
  MINFER_CHECK(!on || backend_.device() == DeviceKind::cpu, "counting the experts read needs a host backend, not ",
               backend_.name());
  counting_experts_ = on;
  expert_reads_ = ExpertReads();
  expert_seen_.assign(size_t(config_.n_experts), 0);
}

void LlamaModel::tally_expert_reads(const LayerViews& v) {
  const Layer& w = *v.w;
  const uint64_t expert_bytes =
      (w.w1_experts.nbytes() + w.w3_experts.nbytes() + w.w2_experts.nbytes()) / uint64_t(config_.n_experts);
  std::fill(expert_seen_.begin(), expert_seen_.end(), 0);
  const int32_t* ids = v.expert_ids.data_as<int32_t>();
  op_checks::expert_ids("count_expert_reads", ids, v.expert_ids.numel(), config_.n_experts);
  for (int64_t i = 0; i < v.expert_ids.numel(); ++i) {
    uint8_t& seen = expert_seen_[size_t(ids[i])];
    if (seen) continue;
    seen = 1;
    ++expert_reads_.experts;
    expert_reads_.bytes += expert_bytes;
  }
}

void LlamaModel::forward(const ForwardBatch& b, const KvCache& cache, const Tensor& logits) {
  const int64_t M = b.tokens.size(0), R = b.logit_rows.size(0);
  MINFER_CHECK(M <= ws_.rows && R <= ws_.logit_rows, "forward: a batch of ", M, " rows (", R,
               " logit rows) exceeds the reserved ", ws_.rows, " (", ws_.logit_rows, ")");
  MINFER_CHECK(cache.n_layers() == config_.n_layers && cache.n_kv_heads() == config_.n_kv_heads &&
                   cache.head_dim() == config_.head_dim(),
               "forward: the KV cache does not match the model");
  Tensor x = ws_.x.slice(0, 0, M);
  if (counting_experts_) {
    ++expert_reads_.passes;
    expert_reads_.rows += uint64_t(M);
    for (int64_t l = 0; l < config_.n_layers; ++l)
      if (config_.layer_has_experts(l)) expert_reads_.predicted_experts += config_.expected_experts_read(M);
  }
  backend_.gather_rows(x, w_.token_embedding, b.tokens, config_.embedding_scale);
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    TraceRange trace("layer");
    const LayerViews views = layer_views(l, M, cache);
    if (kernels_ == Kernels::fused) forward_layer_fused(l, views, b);
    else forward_layer_unfused(views, b);
  }
  if (R == 0) return;
  // Logits only where they are needed: gather those rows, normalise, classify.
  Tensor last = ws_.last.slice(0, 0, R), last_norm = ws_.last_norm.slice(0, 0, R);
  backend_.gather_rows(last, x, b.logit_rows, 1.0f);
  backend_.rmsnorm(last_norm, last, w_.rms_final, config_.rms_eps);
  if (comm_ != nullptr) gather_logits(logits, last_norm);
  else backend_.matmul(logits, last_norm, w_.classifier);
}

void LlamaModel::sum_over_ranks(const Tensor& x) {
  if (comm_ == nullptr) return;
  backend_.synchronize();
  comm_->all_reduce_sum(x);
}

// note: all_gather joins the ranks' parts flat, rank after rank, so the R rows of rank r's logits
// arrive as one (R, its vocabulary) block; each block is then copied into its columns of logits.
void LlamaModel::gather_logits(const Tensor& logits, const Tensor& last_norm) {
  const int64_t R = logits.size(0), V = config_.vocab_size;
  const Tensor part = ws_.logits_part.slice(0, 0, R);
  backend_.matmul(part, last_norm, w_.classifier);
  backend_.synchronize();
  for (size_t r = 0; r < vocab_counts_.size(); ++r) gather_counts_[r] = R * vocab_counts_[r];
  const Tensor gathered = ws_.logits_gathered.slice(0, 0, R).reshape({R * V});
  comm_->all_gather(gathered, part.reshape({R * part.size(1)}), gather_counts_);
  int64_t at = 0, column = 0;
  for (int64_t count : vocab_counts_) {
    logits.slice(1, column, column + count).copy_from(gathered.slice(0, at, at + R * count).reshape({R, count}));
    at += R * count;
    column += count;
  }
}

}  // namespace minfer
