#include "model/tensor_split.h"

#include <sys/mman.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <set>

#include "core/error.h"

namespace minfer {

namespace {

// The smallest count of `width`-wide pieces whose total is a multiple of `grain`.
int64_t pieces_per_unit(int64_t width, int64_t grain) { return grain / std::gcd(width, grain); }

// Part `part` of `parts` of a dimension of `n` elements cut in units of `unit` (the last unit may
// be short): the units dealt out as evenly as they go, the earlier parts taking the extra ones.
// The part is rank `rank`'s of `ranks`; `what` names the dimension in the refusal when it gets no
// unit.
IndexRange deal(int64_t n, int64_t unit, int part, int parts, const std::string& what, int rank, int ranks) {
  if (n == 0) return {};
  const int64_t units = (n + unit - 1) / unit, base = units / parts, extra = units % parts;
  const int64_t first = part * base + std::min<int64_t>(part, extra);
  const int64_t count = base + (part < extra ? 1 : 0);
  MINFER_CHECK(count > 0, "tensor parallel over ", ranks, " ranks: ", what, " in units of ", unit, " are ", units,
               " units, which leaves rank ", rank, " nothing");
  return {first * unit, std::min(n, (first + count) * unit)};
}

}  // namespace

TensorSplit split_for_rank(const LlamaConfig& c, const SplitGrain& grain, int rank, int ranks) {
  MINFER_CHECK(ranks >= 1 && ranks <= TensorSplit::kMaxRanks, "tensor parallel: ", ranks, " ranks (1 to ",
               TensorSplit::kMaxRanks, ")");
  MINFER_CHECK(rank >= 0 && rank < ranks, "tensor parallel: rank ", rank, " of ", ranks);
  MINFER_CHECK(grain.attention_columns >= 1 && grain.ffn_columns >= 1 && grain.expert_columns >= 1,
               "tensor parallel: a grain below 1");
  TensorSplit s;
  s.rank = rank;
  s.ranks = ranks;
  const int64_t hd = c.head_dim(), g = c.n_heads / c.n_kv_heads;
  if (ranks <= c.n_kv_heads) {
    // Whole KV groups: a unit of u groups, g query heads each, whose wo columns fill whole blocks.
    const int64_t u = pieces_per_unit(g * hd, grain.attention_columns);
    s.kv_heads = deal(c.n_kv_heads, u, rank, ranks, "the " + std::to_string(c.n_kv_heads) + " KV heads", rank, ranks);
    s.q_heads = {s.kv_heads.begin * g, s.kv_heads.end * g};
  } else {
    // note: a rank's query heads must all read one KV head, or the attention kernels' grouping
    // (query head h reads KV head h / (heads / kv_heads)) would pair them wrongly within the shard;
    // so each KV head goes to ranks / n_kv_heads ranks whole, and they share its query heads.
    MINFER_CHECK(ranks % c.n_kv_heads == 0, "tensor parallel over ", ranks, " ranks: more ranks than the ",
                 c.n_kv_heads, " KV heads, and not a multiple of them");
    // Each group ends on a cut between ranks, so its wo columns must be whole blocks.
    MINFER_CHECK(g * hd % grain.attention_columns == 0, "tensor parallel over ", ranks, " ranks: a KV head's ",
                 g * hd, " columns of wo are not whole blocks of ", grain.attention_columns);
    const int per_kv = ranks / static_cast<int>(c.n_kv_heads), kv = rank / per_kv;
    s.kv_heads = {kv, kv + 1};
    const IndexRange in_group = deal(g, pieces_per_unit(hd, grain.attention_columns), rank % per_kv, per_kv,
                                     "a KV head's " + std::to_string(g) + " query heads", rank, ranks);
    s.q_heads = {kv * g + in_group.begin, kv * g + in_group.end};
  }
  bool dense_used = false;
  for (int64_t l = 0; l < c.n_layers; ++l) dense_used = dense_used || !c.layer_has_experts(l);
  if (dense_used)
    s.ffn = deal(c.hidden_dim, grain.ffn_columns, rank, ranks,
                 "the feed-forward's " + std::to_string(c.hidden_dim) + " hidden units", rank, ranks);
  if (c.n_experts > 0) {
    s.expert_hidden = deal(c.expert_hidden_dim, grain.expert_columns, rank, ranks,
                           "an expert's " + std::to_string(c.expert_hidden_dim) + " hidden units", rank, ranks);
    s.shared_ffn = deal(c.shared_expert_hidden_dim, grain.ffn_columns, rank, ranks,
                        "the shared expert's " + std::to_string(c.shared_expert_hidden_dim) + " hidden units", rank,
                        ranks);
  }
  s.vocab = deal(c.vocab_size, 1, rank, ranks, "the vocabulary's " + std::to_string(c.vocab_size) + " tokens", rank,
                 ranks);
  return s;
}

LlamaConfig TensorSplit::shard_config(const LlamaConfig& full) const {
  LlamaConfig c = full;
  c.head_size = full.head_dim();
  c.n_heads = q_heads.size();
  c.n_kv_heads = kv_heads.size();
  if (ffn.size() > 0) c.hidden_dim = ffn.size();  // a model of experts alone keeps its unused one
  if (full.n_experts > 0) {
    c.expert_hidden_dim = expert_hidden.size();
    c.shared_expert_hidden_dim = shared_ffn.size();
  }
  return c;
}

std::string TensorSplit::describe(const LlamaConfig& full) const {
  auto range = [](const IndexRange& r, int64_t n) {
    return std::to_string(r.begin + 1) + "-" + std::to_string(r.end) + " of " + std::to_string(n);
  };
  std::string out = "rank " + std::to_string(rank) + " of " + std::to_string(ranks) + ": heads " +
                    range(q_heads, full.n_heads) + ", KV heads " + range(kv_heads, full.n_kv_heads);
  if (ffn.size() > 0) out += ", hidden " + range(ffn, full.hidden_dim);
  if (expert_hidden.size() > 0) out += ", expert hidden " + range(expert_hidden, full.expert_hidden_dim);
  if (shared_ffn.size() > 0) out += ", shared expert " + range(shared_ffn, full.shared_expert_hidden_dim);
  return out + ", vocabulary " + range(vocab, full.vocab_size);
}

namespace {

// Rows [r.begin per, r.end per) of a matrix or a bias: a view.
Tensor rows_of(const Tensor& t, const IndexRange& r, int64_t per) { return t.slice(0, r.begin * per, r.end * per); }

// Columns [r.begin, r.end) of a host matrix (rows, in), copied into memory of their own: a
// quantized row's blocks are bytes, so the cut (on a block: SplitGrain) is a byte offset.
// note: the copy is an anonymous mapping of its own, so that once LlamaModel has uploaded it, the
// shard's release gives its pages back (madvise) though the shard still holds the tensor: a rank
// loading holds one copied matrix at a time, not all of them.
Tensor columns_of(const Tensor& w, const IndexRange& r) {
  const int64_t rows = w.size(0), in = w.size(1);
  const size_t row_bytes = size_t(dtype_bytes(w.dtype(), uint64_t(in)));
  const size_t first = size_t(dtype_bytes(w.dtype(), uint64_t(r.begin)));
  const size_t width = size_t(dtype_bytes(w.dtype(), uint64_t(r.size())));
  const size_t size = width * size_t(rows);
  void* memory = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  MINFER_CHECK(memory != MAP_FAILED, "tensor parallel: no memory for a matrix's ", size, " bytes of columns");
  std::shared_ptr<char> bytes(static_cast<char*>(memory), [size](char* p) { munmap(p, size); });
  const char* src = static_cast<const char*>(w.data());
  for (int64_t i = 0; i < rows; ++i) std::memcpy(bytes.get() + size_t(i) * width, src + size_t(i) * row_bytes + first, width);
  return Tensor::wrap(bytes.get(), {rows, r.size()}, w.dtype(), DeviceKind::cpu, bytes);
}

}  // namespace

LlamaHostWeights shard_host_weights(const LlamaHostWeights& full, const TensorSplit& s) {
  if (s.ranks == 1) return full;
  const LlamaConfig& c = full.config;
  MINFER_CHECK(!c.qk_norm_whole, "tensor parallel over ", s.ranks,
               " ranks: OLMoE's q and k norms span every head, which the split does not divide yet");
  LlamaHostWeights w = full;
  w.config = s.shard_config(c);
  w.config.shared_classifier = false;
  const int64_t hd = c.head_dim();
  const IndexRange q_dims = {s.q_heads.begin * hd, s.q_heads.end * hd};
  // The columns are copies: their sources' pages go now, and LlamaModel's release of a copy gives
  // the copy's pages back (columns_of's note), not the file's.
  auto copies = std::make_shared<std::set<const void*>>();
  auto columns = [&](const Tensor& src, const IndexRange& r) {
    Tensor out = columns_of(src, r);
    copies->insert(out.data());
    if (full.release) full.release(src);
    return out;
  };
  w.classifier = rows_of(c.shared_classifier ? full.token_embedding : full.classifier, s.vocab, 1);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LlamaHostWeights::Layer& src = full.layers[size_t(l)];
    LlamaHostWeights::Layer& dst = w.layers[size_t(l)];
    dst.wq = rows_of(src.wq, s.q_heads, hd);
    dst.wk = rows_of(src.wk, s.kv_heads, hd);
    dst.wv = rows_of(src.wv, s.kv_heads, hd);
    if (c.qkv_bias) {
      dst.bq = rows_of(src.bq, s.q_heads, hd);
      dst.bk = rows_of(src.bk, s.kv_heads, hd);
      dst.bv = rows_of(src.bv, s.kv_heads, hd);
    }
    dst.wo = columns(src.wo, q_dims);
    const IndexRange& hidden = c.layer_has_experts(l) ? s.shared_ffn : s.ffn;
    if (c.ffn_hidden(l) > 0) {
      dst.w1 = rows_of(src.w1, hidden, 1);
      dst.w3 = rows_of(src.w3, hidden, 1);
      dst.w2 = columns(src.w2, hidden);
    }
    for (size_t e = 0; e < src.w1_experts.size(); ++e) {
      dst.w1_experts[e] = rows_of(src.w1_experts[e], s.expert_hidden, 1);
      dst.w3_experts[e] = rows_of(src.w3_experts[e], s.expert_hidden, 1);
      dst.w2_experts[e] = columns(src.w2_experts[e], s.expert_hidden);
    }
  }
  w.release = [release = full.release, copies](const Tensor& t) {
    if (copies->count(t.data()) != 0)
      madvise(t.data(), t.nbytes(), MADV_DONTNEED);  // its own mapping, from its first page
    else if (release)
      release(t);
  };
  return w;
}

}  // namespace minfer
