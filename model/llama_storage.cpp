// LlamaModel's weights: what each is stored as (the file's type or the one asked for, per role and
// layer), planned and allocated before any byte is copied, uploaded from the host (converted,
// reordered for RoPE, norms offset) or generated (presets), and handed to the backend to pack. The
// forward pass that reads them is model/llama.cpp.
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
  const auto shapes = c.layer_matrix_shapes(l);
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

// Layer l's expert matrices (w1, w3, w2: LlamaConfig::expert_matrix_shapes), each as one of its
// experts, with expert 0's host tensor (the experts of a matrix share one type).
std::array<LayerMatrix, 3> expert_matrices(const LlamaConfig& c, int64_t l, const LlamaHostWeights::Layer* h) {
  const auto shapes = c.expert_matrix_shapes();
  const std::array<const std::vector<Tensor>*, 3> host = {h ? &h->w1_experts : nullptr, h ? &h->w3_experts : nullptr,
                                                         h ? &h->w2_experts : nullptr};
  std::array<LayerMatrix, 3> m{};
  for (size_t i = 0; i < m.size(); ++i)
    m[i] = {shapes[i].role, l, shapes[i].rows, shapes[i].in, host[i] && !host[i]->empty() ? &(*host[i])[0] : nullptr};
  return m;
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
    if (m[i].rows == 0 || m[i].in == 0) {  // a layer of experts without a shared expert has no dense feed-forward
      ++i;
      continue;
    }
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
  if (c.qk_norm)
    biases = checked_add(biases, checked_mul(uint64_t(c.n_layers), uint64_t(c.q_norm_dim() + c.k_norm_dim()), what),
                         what);
  const uint64_t rope =
      checked_mul(uint64_t(c.rope_theta_sliding > 0.0 ? 2 : 1) * uint64_t(c.n_ctx), uint64_t(c.head_dim()), what);
  uint64_t bytes = checked_mul(checked_add(checked_add(norms, biases, what), rope, what), 4, what);
  bytes = checked_add(bytes, stored_bytes(wanted, embedding_table(c, host), c.n_layers), what);
  if (!c.shared_classifier) bytes = checked_add(bytes, stored_bytes(wanted, classifier_table(c, host), c.n_layers), what);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LlamaHostWeights::Layer* h = host ? &host->layers[size_t(l)] : nullptr;
    for (const LayerMatrix& m : layer_matrices(c, l, h)) bytes = checked_add(bytes, stored_bytes(wanted, m, c.n_layers), what);
    if (!c.layer_has_experts(l)) continue;
    for (const LayerMatrix& m : expert_matrices(c, l, h))
      bytes = checked_add(bytes, checked_mul(uint64_t(c.n_experts), stored_bytes(wanted, m, c.n_layers), what), what);
    bytes = checked_add(bytes, checked_product({uint64_t(c.router_rows()), uint64_t(c.dim), 4}, what), what);
  }
  return bytes;
}

}  // namespace

uint64_t LlamaModel::weight_bytes(const LlamaConfig& c, const WeightTypes& types) {
  return planned_bytes(c, nullptr, types);
}

uint64_t LlamaModel::weight_bytes(const LlamaHostWeights& w, const std::optional<WeightTypes>& dtype) {
  return planned_bytes(w.config, &w, dtype);
}

SplitGrain LlamaModel::split_grain(const LlamaHostWeights& w, const std::optional<WeightTypes>& dtype) {
  const LlamaConfig& c = w.config;
  SplitGrain grain;
  // The host's blocks too: the columns are cut from the file's matrix before any conversion.
  auto widen = [&](int64_t& g, const LayerMatrix& m) {
    if (m.rows == 0 || m.in == 0) return;
    g = std::max(g, dtype_block(stored_type(dtype, m, c.n_layers)));
    if (m.host != nullptr) g = std::max(g, dtype_block(m.host->dtype()));
  };
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LlamaHostWeights::Layer* h = &w.layers[size_t(l)];
    const auto m = layer_matrices(c, l, h);
    widen(grain.attention_columns, m[3]);
    widen(grain.ffn_columns, m[6]);
    if (c.layer_has_experts(l)) widen(grain.expert_columns, expert_matrices(c, l, h)[2]);
  }
  return grain;
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

// The embedding table and the classifier (the table itself where the model ties them).
void LlamaModel::allocate_tables(const LlamaHostWeights* host) {
  const LlamaConfig& c = config_;
  const int64_t L = c.n_layers, d = c.dim, V = c.vocab_size;
  // A split model's own classifier is part of a table it ties (shard_host_weights): the table is
  // typed as the whole model's, the classifier's type.
  const DType table_type = stored_type(dtype_, embedding_table(full_config(), host), L);
  // note: split over ranks on a host backend, the embedding table is not copied: gather_rows reads
  // the rows a step's tokens name straight from the host's table (a file's mapping), so a rank
  // keeps resident only the rows it has read, where a copy would hold the whole table on every
  // rank. Another type than the file's needs the copy, and so does a table the shard still ties
  // (one rank, whose vocabulary is the whole table): the classifier is packed in place.
  mapped_embedding_ = comm_ != nullptr && backend_.device() == DeviceKind::cpu && host != nullptr &&
                      !c.shared_classifier && host->token_embedding.dtype() == table_type &&
                      host->token_embedding.is_contiguous();
  if (mapped_embedding_) {
    w_.token_embedding = host->token_embedding;
    mapping_ = host->owner;
  } else {
    w_.token_embedding = backend_.empty({V, d}, table_type);
  }
  const int64_t classifier_rows = comm_ != nullptr ? split_.vocab.size() : V;  // a shard's: its vocabulary
  w_.classifier = c.shared_classifier ? w_.token_embedding
                                      : backend_.empty({classifier_rows, d}, stored_type(dtype_, classifier_table(c, host), L));
}

void LlamaModel::allocate(const std::string& name, const LlamaHostWeights* host) {
  const LlamaConfig& c = config_;
  const int64_t L = c.n_layers, d = c.dim, V = c.vocab_size;
  const std::optional<WeightTypes>& wanted = dtype_;
  // note: each matrix's type is the file's or the one asked for, following its input width
  // (matrix_dtype: quantized blocks need rows of whole blocks, else a legacy type or f16, as
  // llama.cpp falls back).
  allocate_tables(host);
  w_.rms_att = backend_.empty({L, d}, DType::f32);
  w_.rms_ffn = backend_.empty({L, d}, DType::f32);
  w_.rms_final = backend_.empty({d}, DType::f32);
  if (c.qkv_bias) w_.bqkv = backend_.empty({L, c.q_dim() + 2 * c.kv_dim()}, DType::f32);
  if (c.qk_norm) {
    w_.q_norm = backend_.empty({L, c.q_norm_dim()}, DType::f32);
    w_.k_norm = backend_.empty({L, c.k_norm_dim()}, DType::f32);
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
    if (!c.layer_has_experts(l)) continue;
    const auto e = expert_matrices(c, l, host ? &host->layers[size_t(l)] : nullptr);
    Tensor* experts[3] = {&layer.w1_experts, &layer.w3_experts, &layer.w2_experts};
    for (size_t i = 0; i < e.size(); ++i)
      *experts[i] = backend_.empty({c.n_experts, e[i].rows, e[i].in}, stored_type(wanted, e[i], L));
    layer.router = backend_.empty({c.router_rows(), d}, DType::f32);
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
  for (const Layer& layer : w_.layers)
    for (const Tensor* t : {&layer.w1_experts, &layer.w3_experts, &layer.w2_experts})
      if (t->defined()) {
        info_.step_weight_bytes -= t->nbytes();
        info_.expert_bytes += t->nbytes() / uint64_t(c.n_experts);
      }
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

LlamaModel::LlamaModel(Backend& backend, const LlamaHostWeights& full, const std::string& name,
                       const LlamaOptions& options)
    : backend_(backend), config_(full.config), dtype_(options.dtype),
      kernels_(options.kernels) {
  full.validate(name);
  if (options.communicator != nullptr) {
    check_same_file(*options.communicator, full.header_digest);
    // A host communicator on a GPU carries NCCL's set-up; the passes' collectives run on NCCL.
    if (options.communicator->device() == DeviceKind::cpu && backend_.device() == DeviceKind::cuda)
      nccl_ = make_nccl_communicator(*options.communicator, backend_);
    split_over(nccl_ ? *nccl_ : *options.communicator, split_grain(full, dtype_));
    const LlamaHostWeights shard = shard_host_weights(full, split_);
    config_ = shard.config;
    upload_weights(name, shard);
  } else {
    upload_weights(name, full);
  }
}

void LlamaModel::check_same_file(Communicator& comm, uint64_t header_digest) {
  uint64_t rank_0s = header_digest;
  comm.broadcast(Tensor::wrap(&rank_0s, {2}, DType::i32, DeviceKind::cpu), 0);  // 8 bytes as two i32
  MINFER_CHECK(rank_0s == header_digest, "the model file differs from rank 0's (its header and tensor table digest to ", header_digest,
               ", rank 0's to ", rank_0s, "): every rank must load the same file");
}

void LlamaModel::split_over(Communicator& comm, const SplitGrain& grain) {
  MINFER_CHECK(comm.device() == backend_.device(), "tensor parallel: the ", comm.name(), " communicator moves ",
               device_name(comm.device()), " memory, the ", backend_.name(), " backend's tensors are on ",
               device_name(backend_.device()));
  for (int r = 0; r < comm.size(); ++r) {
    const TensorSplit s = split_for_rank(config_, grain, r, comm.size());
    if (r == comm.rank()) split_ = s;
    vocab_counts_.push_back(s.vocab.size());
  }
  gather_counts_.assign(vocab_counts_.size(), 0);
  full_config_ = config_;
  comm_ = &comm;
}

void LlamaModel::upload_weights(const std::string& name, const LlamaHostWeights& weights) {
  allocate(name, &weights);
  const int64_t q = config_.q_dim(), kv = config_.kv_dim(), hd = config_.head_dim();
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
  if (!mapped_embedding_) put(w_.token_embedding, weights.token_embedding);
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
    if (config_.qk_norm) {  // a head's weights (or every head's: qk_norm_whole), reordered as its rows are
      put_rope_rows(w_.q_norm.select(0, l), src.q_norm, config_.qk_norm_whole ? config_.n_heads : 1, norm_offset);
      put_rope_rows(w_.k_norm.select(0, l), src.k_norm, config_.qk_norm_whole ? config_.n_kv_heads : 1, norm_offset);
    }
    put(dst.wo.tensor(), src.wo);
    const int64_t h = config_.ffn_hidden(l);
    if (h > 0) {
      put(dst.w13.slice(0, h).tensor(), src.w1);
      put(dst.w13.slice(h, 2 * h).tensor(), src.w3);
      put(dst.w2.tensor(), src.w2);
    }
    if (!config_.layer_has_experts(l)) continue;
    for (int64_t e = 0; e < config_.n_experts; ++e) {
      put(dst.w1_experts.select(0, e), src.w1_experts[size_t(e)]);
      put(dst.w3_experts.select(0, e), src.w3_experts[size_t(e)]);
      put(dst.w2_experts.select(0, e), src.w2_experts[size_t(e)]);
    }
    put(dst.router.slice(0, 0, config_.n_experts), src.router);
    if (config_.shared_expert_hidden_dim > 0) put(dst.router.slice(0, config_.n_experts, config_.n_experts + 1), src.shared_gate);
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
  MINFER_CHECK(options.communicator == nullptr || options.communicator->size() == 1, name,
               ": tensor parallel needs a model file; synthetic weights are not split");
  allocate(name, nullptr);
  const int64_t q = config_.q_dim(), kv = config_.kv_dim();
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
    const int64_t h = config_.ffn_hidden(l);
    if (h > 0) {
      fill(dst.w13.slice(0, h).tensor(), WeightKind::w1, l);
      fill(dst.w13.slice(h, 2 * h).tensor(), WeightKind::w3, l);
      fill(dst.w2.tensor(), WeightKind::w2, l);
    }
    if (!config_.layer_has_experts(l)) continue;
    fill(dst.router, WeightKind::router, l);
    fill(dst.w1_experts, WeightKind::w1_experts, l);
    fill(dst.w3_experts, WeightKind::w3_experts, l);
    fill(dst.w2_experts, WeightKind::w2_experts, l);
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
  const int64_t q = config_.q_dim(), kv = config_.kv_dim();
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
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    Layer& layer = w_.layers[size_t(l)];
    const int64_t h = config_.ffn_hidden(l);
    pack_parts(layer.wqkv, {q, q + kv});
    pack_parts(layer.wo, {});
    pack_parts(layer.w13, {h});
    pack_parts(layer.w2, {});
    for (Tensor* t : {&layer.w1_experts, &layer.w3_experts, &layer.w2_experts})
      if (t->defined()) pack(*t, true);
    // note: the router stays f32 (as llama-quantize keeps it), a matrix no backend packs: its
    // products depend on the rows that share them unless --batch-invariant, and so do the experts
    // they choose.
    if (layer.router.defined()) pack(layer.router, false);
  }
}

std::string LlamaModel::weight_layout() const {
  if (packed_ == 0) return "";
  return std::to_string(packed_) + " of " + std::to_string(matrices_) + " matrices " +
         row_layout_name(RowLayout::packed16);
}

void LlamaModel::describe_types() {
  std::map<DType, uint64_t> weights;  // of the tables and matrices (not the f32 routers), by type
  for_each_matrix([&](const Tensor& t) { weights[t.dtype()] += uint64_t(t.numel()); }, false);
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

}  // namespace minfer
