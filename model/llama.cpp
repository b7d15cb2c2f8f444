// The Llama forward pass, the same code for every backend and for prefill and decode alike.
//
// A batch is M rows (tokens); each row carries its sequence and its position. One layer:
//
//   x   = embedding[token] * embedding_scale         before the first layer (the scale: Gemma)
//
//   xb  = rmsnorm(x) * rms_att                       attention block
//   qkv = xb Wqkv^T (+ bqkv)                         q (q_dim) | k (kv_dim) | v (kv_dim) per row;
//                                                    the bias with qkv_bias only (Qwen2)
//   q, k = rmsnorm per head (q, k)                   with qk_norm only (Qwen3, Gemma 3)
//   q, k = rope(q, k)                                rotate pairs by the row's position (a
//                                                    sliding layer by its own table: Gemma 3)
//   cache[seq, pos] = k, v                           the KV cache remembers this position
//   att = attention(q, cache)                        each row attends to positions 0..pos, or
//                                                    pos - W + 1..pos in a sliding layer
//   o   = att Wo^T (then rmsnorm(o) * rms_post_att)  the post norm with post_norms only (Gemma 3)
//   x  += o                                          residual
//   xb  = rmsnorm(x) * rms_ffn                       feed-forward block
//   h1 | h3 = xb W13^T
//   f   = (act(h1) * h3) W2^T                        act: silu, or tanh-GELU (Gemma)
//   x  += f (or rmsnorm(f) * rms_post_ffn)           residual
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

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>

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

namespace {

// A weight matrix or table: its role, layer (0 for the tables), shape and host tensor (null for
// synthetic weights).
struct LayerMatrix {
  WeightRole role;
  int64_t layer, rows, in;
  const Tensor* host;
};

// The type a weight is stored in: as `wanted` asks (WeightTypes::of), else as the host holds it,
// else f32.
DType stored_type(const std::optional<WeightTypes>& wanted, const LayerMatrix& m, int64_t n_layers) {
  if (wanted) return wanted->of(m.role, m.layer, n_layers, m.in);
  return m.host != nullptr ? m.host->dtype() : DType::f32;
}

// A layer's matrices (LlamaConfig::layer_matrix_shapes) with their host tensors.
std::array<LayerMatrix, 7> layer_matrices(const LlamaConfig& c, int64_t l, const LlamaHostWeights::Layer* h) {
  using Hosts = std::array<const Tensor*, 7>;
  const Hosts host = h != nullptr ? Hosts{&h->wq, &h->wk, &h->wv, &h->wo, &h->w1, &h->w3, &h->w2} : Hosts{};
  const auto shapes = c.layer_matrix_shapes();
  std::array<LayerMatrix, 7> m{};
  for (size_t i = 0; i < m.size(); ++i) m[i] = {shapes[i].role, l, shapes[i].rows, shapes[i].in, host[i]};
  return m;
}
// The token embedding table and the classifier (the same table where the model ties them, and
// then typed as the classifier, as llama-quantize types a tied token_embd).
LayerMatrix embedding_table(const LlamaConfig& c, const LlamaHostWeights* h) {
  return {c.shared_classifier ? WeightRole::classifier : WeightRole::embedding, 0, c.vocab_size, c.dim,
          h ? &h->token_embedding : nullptr};
}
LayerMatrix classifier_table(const LlamaConfig& c, const LlamaHostWeights* h) {
  return {WeightRole::classifier, 0, c.vocab_size, c.dim, h ? &h->classifier : nullptr};
}

// The parts a model's matrices are stored in, planned before any memory is taken.
struct PlannedPart {
  RowBlocks* into;
  int64_t rows, in;
  DType type;
};

// Matrices [first, last) of `m` as one RowBlocks: one part per run of one type.
void plan_rows(std::vector<PlannedPart>& plan, RowBlocks* into, const std::array<LayerMatrix, 7>& m, size_t first,
               size_t last, const std::optional<WeightTypes>& wanted, int64_t n_layers) {
  for (size_t i = first; i < last;) {
    const DType t = stored_type(wanted, m[i], n_layers);
    int64_t rows = 0;
    size_t j = i;
    for (; j < last && stored_type(wanted, m[j], n_layers) == t; ++j) rows += m[j].rows;
    plan.push_back({into, rows, m[i].in, t});
    i = j;
  }
}

// note: one allocation per type holds every part of that type, back to back, as the stacked
// (layers, rows, in) tensors did before types could mix: a part of its own per layer would be
// rounded up to 2 MiB huge pages each, megabytes of resident padding.
void allocate_parts(Backend& backend, const std::vector<PlannedPart>& plan) {
  std::map<DType, int64_t> elements;
  for (const PlannedPart& p : plan) elements[p.type] += p.rows * p.in;
  std::map<DType, Tensor> arenas;
  for (const auto& [type, n] : elements) arenas[type] = backend.empty({n}, type);
  std::map<DType, int64_t> used;
  for (const PlannedPart& p : plan) {
    int64_t& at = used[p.type];
    p.into->parts.push_back(arenas[p.type].slice(0, at, at + p.rows * p.in).reshape({p.rows, p.in}));
    at += p.rows * p.in;
  }
}

uint64_t stored_bytes(const std::optional<WeightTypes>& wanted, const LayerMatrix& m, int64_t n_layers) {
  return dtype_bytes(stored_type(wanted, m, n_layers), checked_mul(uint64_t(m.rows), uint64_t(m.in), "model size"));
}

// Every weight as allocate() will store it: the norms, the biases (and q, k norms) and the RoPE
// tables in f32, the tables and the matrices in their stored types. `host` may be null (synthetic
// weights, typed by `wanted`).
uint64_t planned_bytes(const LlamaConfig& c, const LlamaHostWeights* host, const std::optional<WeightTypes>& wanted) {
  const char* what = "model size";
  const uint64_t layer_norms = c.post_norms ? 4 : 2;
  const uint64_t norms = checked_mul(layer_norms * uint64_t(c.n_layers) + 1, uint64_t(c.dim), what);
  uint64_t biases = c.qkv_bias ? checked_mul(uint64_t(c.n_layers), uint64_t(c.q_dim() + 2 * c.kv_dim()), what) : 0;
  if (c.qk_norm) biases = checked_add(biases, checked_mul(uint64_t(c.n_layers), 2 * uint64_t(c.head_dim()), what), what);
  const uint64_t rope =
      checked_mul(uint64_t(c.rope_theta_sliding > 0.0 ? 2 : 1) * uint64_t(c.n_ctx), uint64_t(c.head_dim()), what);
  uint64_t bytes = checked_mul(checked_add(checked_add(norms, biases, what), rope, what), 4, what);
  bytes = checked_add(bytes, stored_bytes(wanted, embedding_table(c, host), c.n_layers), what);
  if (!c.shared_classifier) bytes = checked_add(bytes, stored_bytes(wanted, classifier_table(c, host), c.n_layers), what);
  for (int64_t l = 0; l < c.n_layers; ++l)
    for (const LayerMatrix& m : layer_matrices(c, l, host ? &host->layers[size_t(l)] : nullptr))
      bytes = checked_add(bytes, stored_bytes(wanted, m, c.n_layers), what);
  return bytes;
}

}  // namespace

uint64_t LlamaModel::weight_bytes(const LlamaConfig& c, const WeightTypes& types) {
  return planned_bytes(c, nullptr, types);
}

uint64_t LlamaModel::weight_bytes(const LlamaHostWeights& w, const std::optional<WeightTypes>& dtype) {
  return planned_bytes(w.config, &w, dtype);
}

namespace {

// The (n_ctx, head_dim) table of (cos, sin) pairs on the backend: the global one, or with `sliding`
// the sliding layers' own (LlamaConfig::rope_theta_sliding).
Tensor rope_table(Backend& backend, const LlamaConfig& c, bool sliding) {
  const std::vector<float> inv_freq = c.rope_inv_freq(sliding);
  Tensor host = backend.empty_host({c.n_ctx, c.head_dim()}, DType::f32);
  ref::rope_table(host.data_as<float>(), c.n_ctx, inv_freq.data(), c.head_dim());
  Tensor table = backend.empty({c.n_ctx, c.head_dim()}, DType::f32);
  table.copy_from(host);
  return table;
}

}  // namespace

void LlamaModel::allocate(const std::string& name, const LlamaHostWeights* host) {
  const LlamaConfig& c = config_;
  const int64_t L = c.n_layers, d = c.dim, V = c.vocab_size;
  const std::optional<WeightTypes>& wanted = dtype_;
  // note: each matrix's type is the file's or the one asked for, following its input width
  // (matrix_dtype: quantized blocks need rows of whole blocks, else a legacy type or f16, as
  // llama.cpp falls back).
  w_.token_embedding = backend_.empty({V, d}, stored_type(wanted, embedding_table(c, host), L));
  w_.classifier =
      c.shared_classifier ? w_.token_embedding : backend_.empty({V, d}, stored_type(wanted, classifier_table(c, host), L));
  w_.rms_att = backend_.empty({L, d}, DType::f32);
  w_.rms_ffn = backend_.empty({L, d}, DType::f32);
  w_.rms_final = backend_.empty({d}, DType::f32);
  if (c.qkv_bias) w_.bqkv = backend_.empty({L, c.q_dim() + 2 * c.kv_dim()}, DType::f32);
  if (c.qk_norm) {
    w_.q_norm = backend_.empty({L, c.head_dim()}, DType::f32);
    w_.k_norm = backend_.empty({L, c.head_dim()}, DType::f32);
  }
  if (c.post_norms) {
    w_.rms_post_att = backend_.empty({L, d}, DType::f32);
    w_.rms_post_ffn = backend_.empty({L, d}, DType::f32);
  }
  w_.layers.assign(size_t(L), Layer());
  std::vector<PlannedPart> plan;
  for (int64_t l = 0; l < L; ++l) {
    const auto m = layer_matrices(c, l, host ? &host->layers[size_t(l)] : nullptr);
    Layer& layer = w_.layers[size_t(l)];
    plan_rows(plan, &layer.wqkv, m, 0, 3, wanted, L);
    plan_rows(plan, &layer.wo, m, 3, 4, wanted, L);
    plan_rows(plan, &layer.w13, m, 4, 6, wanted, L);
    plan_rows(plan, &layer.w2, m, 6, 7, wanted, L);
  }
  allocate_parts(backend_, plan);
  uint64_t bytes = w_.rms_att.nbytes() + w_.rms_ffn.nbytes() + w_.rms_final.nbytes() +
                   (c.qkv_bias ? w_.bqkv.nbytes() : 0) + (c.qk_norm ? w_.q_norm.nbytes() + w_.k_norm.nbytes() : 0) +
                   (c.post_norms ? w_.rms_post_att.nbytes() + w_.rms_post_ffn.nbytes() : 0);
  for_each_matrix([&](const Tensor& t) {
    bytes += t.nbytes();
    backend_.check_weights(t.dtype(), name);
  });
  w_.rope = rope_table(backend_, c, false);
  if (c.rope_theta_sliding > 0.0) w_.rope_sliding = rope_table(backend_, c, true);

  info_.name = name;
  info_.shape = c.describe();
  info_.vocab_size = V;
  info_.n_ctx = c.n_ctx;
  info_.n_layers = L;
  info_.n_kv_heads = c.n_kv_heads;
  info_.head_dim = c.head_dim();
  info_.n_params = c.n_params();
  info_.weight_bytes = bytes + w_.rope.nbytes() + (w_.rope_sliding.defined() ? w_.rope_sliding.nbytes() : 0);
  info_.embedding_row_bytes = dtype_bytes(w_.token_embedding.dtype(), uint64_t(d));
  // A step reads every matrix, the norms and the classifier; of an embedding table of its own only
  // one row per sequence (embedding_row_bytes).
  info_.step_weight_bytes = bytes - (c.shared_classifier ? 0 : w_.token_embedding.nbytes());
  describe_types();
  info_.bos_id = c.bos_id;
  info_.stop_ids = c.stop_ids;
}

namespace {

// Copies a host tensor of any float or quantized type into a backend tensor of any type minfer can
// make from f32, converting through a host staging buffer when the types differ (f16 to bf16, a
// Q4_K file's matrix to q8_0: both through f32).
void upload(Backend& backend, const Tensor& dst, const Tensor& src) {
  MINFER_CHECK(dst.same_shape(src), "upload: ", src.str(), " into ", dst.str());
  if (dst.dtype() == src.dtype()) {
    dst.copy_from(src);
    return;
  }
  Tensor staging = backend.empty_host(src.shape(), dst.dtype());
  if (src.dtype() == DType::f32 || dst.dtype() == DType::f32) {
    staging.convert_from(src);
  } else {  // through f32
    Tensor wide = backend.empty_host(src.shape(), DType::f32);
    wide.convert_from(src);
    staging.convert_from(wide);
  }
  dst.copy_from(staging);
}

// The rows of a q or k projection (heads * head_dim, in), or the elements of its bias (heads *
// head_dim), reordered from Hugging Face's rotate-half pairs (j, j + head_dim / 2) to interleaved
// pairs (2j, 2j + 1); see model/llama_weights.h.
Tensor interleave_rope_rows(Backend& backend, const Tensor& w, int64_t heads, int64_t head_dim) {
  Tensor out = backend.empty_host(w.shape(), w.dtype());
  const int64_t half = head_dim / 2;
  const int64_t row_bytes = int64_t(dtype_bytes(w.dtype(), w.ndim() == 2 ? uint64_t(w.size(1)) : 1));
  const char* src = static_cast<const char*>(w.data());
  char* dst = static_cast<char*>(out.data());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < half; ++j)
      for (int64_t i = 0; i < 2; ++i)
        std::memcpy(dst + (h * head_dim + 2 * j + i) * row_bytes, src + (h * head_dim + i * half + j) * row_bytes,
                    static_cast<size_t>(row_bytes));
  return out;
}

// An RMSNorm's weights in f32 with `offset` added (LlamaHostWeights::norm_weight_offset: Gemma's
// checkpoints store w for x (1 + w)); `w` itself where the offset is 0.
Tensor offset_norm(Backend& backend, const Tensor& w, float offset) {
  if (offset == 0.0f) return w;
  Tensor out = backend.empty_host(w.shape(), DType::f32);
  out.convert_from(w);
  float* values = out.data_as<float>();
  for (int64_t i = 0; i < out.numel(); ++i) values[i] += offset;
  return out;
}

}  // namespace

LlamaModel::LlamaModel(Backend& backend, const LlamaHostWeights& weights, const std::string& name,
                       const LlamaOptions& options)
    : backend_(backend), config_(weights.config), dtype_(options.dtype),
      kernels_(options.kernels) {
  weights.validate(name);
  allocate(name, &weights);
  const int64_t q = config_.q_dim(), h = config_.hidden_dim, kv = config_.kv_dim(), hd = config_.head_dim();
  // Each tensor is released (its file pages dropped) as soon as it is on the device.
  auto put = [&](const Tensor& dst, const Tensor& src) {
    upload(backend_, dst, src);
    if (weights.release) weights.release(src);
  };
  // `heads` heads of head_dim rows (or elements), reordered under rotate-half; `offset` is added
  // to a norm's weights.
  auto put_rope_rows = [&](const Tensor& dst, const Tensor& src, int64_t heads, float offset = 0.0f) {
    const Tensor shifted = offset_norm(backend_, src, offset);
    upload(backend_, dst, weights.rotate_half ? interleave_rope_rows(backend_, shifted, heads, hd) : shifted);
    if (weights.release) weights.release(src);
  };
  const float norm_offset = weights.norm_weight_offset;
  auto put_norm = [&](const Tensor& dst, const Tensor& src) {
    upload(backend_, dst, offset_norm(backend_, src, norm_offset));
    if (weights.release) weights.release(src);
  };
  put(w_.token_embedding, weights.token_embedding);
  if (!config_.shared_classifier) put(w_.classifier, weights.classifier);
  put_norm(w_.rms_final, weights.rms_final);
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const LlamaHostWeights::Layer& src = weights.layers[static_cast<size_t>(l)];
    const Layer& dst = w_.layers[static_cast<size_t>(l)];
    put_norm(w_.rms_att.select(0, l), src.rms_att);
    put_norm(w_.rms_ffn.select(0, l), src.rms_ffn);
    if (config_.post_norms) {
      put_norm(w_.rms_post_att.select(0, l), src.post_att_norm);
      put_norm(w_.rms_post_ffn.select(0, l), src.post_ffn_norm);
    }
    put_rope_rows(dst.wqkv.slice(0, q).tensor(), src.wq, config_.n_heads);
    put_rope_rows(dst.wqkv.slice(q, q + kv).tensor(), src.wk, config_.n_kv_heads);
    put(dst.wqkv.slice(q + kv, q + 2 * kv).tensor(), src.wv);
    if (config_.qkv_bias) {
      const Tensor bias = w_.bqkv.select(0, l);
      put_rope_rows(bias.slice(0, 0, q), src.bq, config_.n_heads);
      put_rope_rows(bias.slice(0, q, q + kv), src.bk, config_.n_kv_heads);
      put(bias.slice(0, q + kv, q + 2 * kv), src.bv);
    }
    if (config_.qk_norm) {  // a head's weights, reordered as its rows are
      put_rope_rows(w_.q_norm.select(0, l), src.q_norm, 1, norm_offset);
      put_rope_rows(w_.k_norm.select(0, l), src.k_norm, 1, norm_offset);
    }
    put(dst.wo.tensor(), src.wo);
    put(dst.w13.slice(0, h).tensor(), src.w1);
    put(dst.w13.slice(h, 2 * h).tensor(), src.w3);
    put(dst.w2.tensor(), src.w2);
  }
  backend_.synchronize();
  pack_weights();
  // The staging buffers of the conversions (pinned memory on CUDA, up to the largest matrix in
  // f32) go back to the system instead of staying cached for the life of the process.
  backend_.host_pool().release_cached();
}

LlamaModel::LlamaModel(Backend& backend, const LlamaConfig& config, const std::string& name,
                       const LlamaOptions& options)
    : backend_(backend), config_(config), dtype_(options.dtype.value_or(WeightTypes(DType::f32))), kernels_(options.kernels) {
  config_.validate(name);
  allocate(name, nullptr);
  const int64_t q = config_.q_dim(), h = config_.hidden_dim, kv = config_.kv_dim();
  auto fill = [&](const Tensor& t, WeightKind kind, int64_t layer) {
    WeightInit init = weight_init(config_, options.seed, kind, layer);
    backend_.fill_uniform(t, init.seed, init.lo, init.hi);
  };
  fill(w_.token_embedding, WeightKind::embedding, 0);
  if (!config_.shared_classifier) fill(w_.classifier, WeightKind::classifier, 0);
  fill(w_.rms_final, WeightKind::rms_final, 0);
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const Layer& dst = w_.layers[static_cast<size_t>(l)];
    fill(w_.rms_att.select(0, l), WeightKind::rms_att, l);
    fill(w_.rms_ffn.select(0, l), WeightKind::rms_ffn, l);
    fill(dst.wqkv.slice(0, q).tensor(), WeightKind::wq, l);
    fill(dst.wqkv.slice(q, q + kv).tensor(), WeightKind::wk, l);
    fill(dst.wqkv.slice(q + kv, q + 2 * kv).tensor(), WeightKind::wv, l);
    if (config_.qkv_bias) fill(w_.bqkv.select(0, l), WeightKind::qkv_bias, l);
    if (config_.qk_norm) {
      fill(w_.q_norm.select(0, l), WeightKind::qk_norm, l);
      fill(w_.k_norm.select(0, l), WeightKind::qk_norm, l);
    }
    if (config_.post_norms) {
      fill(w_.rms_post_att.select(0, l), WeightKind::post_norm, l);
      fill(w_.rms_post_ffn.select(0, l), WeightKind::post_norm, l);
    }
    fill(dst.wo.tensor(), WeightKind::wo, l);
    fill(dst.w13.slice(0, h).tensor(), WeightKind::w1, l);
    fill(dst.w13.slice(h, 2 * h).tensor(), WeightKind::w3, l);
    fill(dst.w2.tensor(), WeightKind::w2, l);
  }
  backend_.synchronize();
  pack_weights();
}

// note: the unfused path multiplies rows [0, q), [q, q + kv) and [q + kv, q + 2 kv) of wqkv and
// [0, h), [h, 2 h) of w13 apart (forward_layer_unfused), and a packed matrix is cut only at
// multiples of 16 rows (RowLayout): a part that such a cut crosses elsewhere stays in the file's
// layout, and its products take the file's kernels (and --batch-invariant). Each part of a matrix
// in several types (Q4_K_M's V in Q6_K) is packed on its own.
void LlamaModel::pack_weights() {
  const int64_t q = config_.q_dim(), kv = config_.kv_dim(), h = config_.hidden_dim;
  auto pack = [&](Tensor& t, bool cuttable) {
    if (cuttable) t = backend_.pack_weights(t);
    ++matrices_;
    packed_ += t.row_layout() != RowLayout::file;
  };
  auto pack_parts = [&](RowBlocks& w, std::initializer_list<int64_t> cuts) {
    int64_t first = 0;  // of the part
    for (Tensor& part : w.parts) {
      const int64_t end = first + part.size(0);
      pack(part, std::all_of(cuts.begin(), cuts.end(), [&](int64_t c) {
             return c <= first || c >= end || (c - first) % kPackedGroupRows == 0;
           }));
      first = end;
    }
  };
  pack(w_.classifier, true);
  if (config_.shared_classifier) w_.token_embedding = w_.classifier;  // gather_rows reads either layout
  for (Layer& layer : w_.layers) {
    pack_parts(layer.wqkv, {q, q + kv});
    pack_parts(layer.wo, {});
    pack_parts(layer.w13, {h});
    pack_parts(layer.w2, {});
  }
}

std::string LlamaModel::weight_layout() const {
  if (packed_ == 0) return "";
  return std::to_string(packed_) + " of " + std::to_string(matrices_) + " matrices " +
         row_layout_name(RowLayout::packed16);
}

void LlamaModel::describe_types() {
  std::map<DType, uint64_t> weights;  // of the tables and matrices, by type
  for_each_matrix([&](const Tensor& t) { weights[t.dtype()] += uint64_t(t.numel()); });
  uint64_t total = 0, most = 0;
  for (const auto& [type, n] : weights) {
    total += n;
    if (n > most) {
      most = n;
      info_.dtype = type;
    }
  }
  info_.weight_types.clear();
  if (weights.size() == 1) return;
  for (const auto& [type, n] : weights)
    info_.weight_types += std::string(info_.weight_types.empty() ? "" : ", ") + dtype_name(type) + " " +
                          std::to_string(int(std::lround(100.0 * double(n) / double(total)))) + "%";
}

std::array<LlamaModel::WorkspaceBuffer, 9> LlamaModel::workspace_buffers() const {
  const int64_t d = config_.dim, h = config_.hidden_dim, q = config_.q_dim(), kv = config_.kv_dim();
  return {{{&Workspace::x, false, d},
           {&Workspace::xb, false, d},
           {&Workspace::qkv, false, q + 2 * kv},
           {&Workspace::att, false, q},
           {&Workspace::proj, false, d},
           {&Workspace::h13, false, 2 * h},
           {&Workspace::hb, false, h},
           {&Workspace::last, true, d},
           {&Workspace::last_norm, true, d}}};
}

uint64_t LlamaModel::activation_bytes(int64_t max_rows, int64_t max_logit_rows) const {
  const char* what = "activations";
  uint64_t bytes = 0;
  for (const WorkspaceBuffer& b : workspace_buffers()) {
    const int64_t rows = b.per_logit_row ? max_logit_rows : max_rows;
    bytes = checked_add(bytes, checked_product({uint64_t(rows), uint64_t(b.columns), 4}, what), what);
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
    ws_.*b.member = backend_.empty({b.per_logit_row ? logit_rows : rows, b.columns}, DType::f32);
}

// One layer's activations and weights for a batch of M rows.
struct LlamaModel::LayerViews {
  Tensor x, xb, qkv, q, k, v, att, proj, h13, gate, up, hb;  // activations (M, ...)
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
  const int64_t qd = config_.q_dim(), h = config_.hidden_dim, kv = config_.kv_dim(), hd = config_.head_dim();
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
  // its weight's width on its own (engine/backend.h), so q's row is n_heads runs and k's n_kv_heads.
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
  if (config_.post_norms) be.rmsnorm(v.proj, v.proj, v.rms_post_att, config_.rms_eps);
  be.add(v.x, v.x, v.proj);

  be.rmsnorm(v.xb, v.x, v.rms_ffn, config_.rms_eps);
  matmul(be, v.gate, v.xb, v.w->w13, 0, h);
  matmul(be, v.up, v.xb, v.w->w13, h, 2 * h);
  be.glu(v.hb, v.gate, v.up, config_.activation);
  matmul(be, v.proj, v.hb, v.w->w2);
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
  // Per head only because q_norm and k_norm are head_dim wide (rmsnorm's runs: forward_layer_unfused).
  if (config_.qk_norm) {
    be.rmsnorm(v.q, v.q, v.q_norm, eps);
    be.rmsnorm(v.k, v.k, v.k_norm, eps);
  }
  be.rope_kv_store(v.k_cache, v.v_cache, v.block_table, v.q, v.k, v.v, b.seq, b.pos, v.rope, config_.head_dim());
  // The online softmax, chosen with the fused set (`--kernels fused`; forward_layer_unfused's note).
  be.attention(v.att, v.q, v.k_cache, v.v_cache, v.block_table, b.seq, b.pos, v.attention,
               AttentionAlgorithm::online_softmax);
  matmul(be, v.proj, v.att, v.w->wo);
  if (config_.post_norms) be.rmsnorm(v.proj, v.proj, v.rms_post_att, eps);

  be.residual_rmsnorm(v.xb, v.x, v.proj, v.rms_ffn, eps);  // x += proj; xb = rmsnorm(x)
  matmul(be, v.h13, v.xb, v.w->w13);
  be.glu(v.hb, v.gate, v.up, config_.activation);
  matmul(be, v.proj, v.hb, v.w->w2);
  if (config_.post_norms) be.rmsnorm(v.proj, v.proj, v.rms_post_ffn, eps);
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
  backend_.matmul(logits, last_norm, w_.classifier);
}

}  // namespace minfer
