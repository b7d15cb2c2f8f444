#include "engine/op_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "kernels/ref/route_experts.h"

namespace minfer::op_checks {

namespace {
void on_device(const char* op, const char* name, const Tensor& t, DeviceKind device) {
  MINFER_CHECK(t.defined(), op, ": ", name, " is not set");
  MINFER_CHECK(t.device() == device, op, ": ", name, " ", t.str(), " is not on ",
               device_name(device));
}
}  // namespace

Rows activation(const char* op, const char* name, const Tensor& t, DeviceKind device) {
  on_device(op, name, t, device);
  MINFER_CHECK(t.ndim() == 2 && t.dtype() == DType::f32, op, ": ", name,
               " must be a 2-D f32 tensor, got ", t.str());
  MINFER_CHECK(t.rows_dense() && (t.size(0) <= 1 || t.stride(0) >= t.size(1)), op, ": ", name,
               " ", t.str(), " needs dense, non-overlapping rows");
  return {t.size(0), t.size(1), t.size(0) <= 1 ? t.size(1) : t.stride(0)};
}

void same_rows(const char* op, const Rows& a, const char* a_name, const Rows& b,
               const char* b_name) {
  MINFER_CHECK(a.rows == b.rows && a.cols == b.cols, op, ": ", a_name, " is [", a.rows, ", ",
               a.cols, "] but ", b_name, " is [", b.rows, ", ", b.cols, "]");
}

void index_vector(const char* op, const char* name, const Tensor& t, int64_t rows,
                  DeviceKind device) {
  on_device(op, name, t, device);
  MINFER_CHECK(t.ndim() == 1 && t.dtype() == DType::i32 && t.size(0) == rows &&
                   t.is_contiguous(),
               op, ": ", name, " must be i32[", rows, "], got ", t.str());
}

void weight(const char* op, const char* name, const Tensor& t, DeviceKind device) {
  on_device(op, name, t, device);
  MINFER_CHECK(t.ndim() == 2 && t.dtype() != DType::i32 && t.is_contiguous(), op, ": ", name,
               " must be a dense 2-D float or quantized tensor, got ", t.str());
}

CacheShape kv_cache(const char* op, const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table,
                    DeviceKind device) {
  on_device(op, "k_cache", k_cache, device);
  on_device(op, "v_cache", v_cache, device);
  on_device(op, "block_table", block_table, device);
  MINFER_CHECK(k_cache.ndim() == 4 && k_cache.is_contiguous() && k_cache.size(2) > 0 &&
                   (k_cache.dtype() == DType::f32 || k_cache.dtype() == DType::f16 || k_cache.dtype() == DType::bf16),
               op, ": k_cache must be a contiguous (blocks, kv_heads, block_size, head_dim) float "
               "tensor, got ", k_cache.str());
  MINFER_CHECK(v_cache.same_shape(k_cache) && v_cache.dtype() == k_cache.dtype() &&
                   v_cache.is_contiguous(),
               op, ": v_cache ", v_cache.str(), " differs from k_cache ", k_cache.str());
  MINFER_CHECK(block_table.ndim() == 2 && block_table.dtype() == DType::i32 && block_table.is_contiguous() &&
                   block_table.size(1) > 0,
               op, ": the block table must be a contiguous i32 (sequences, blocks) tensor, got ", block_table.str());
  return {k_cache.size(0), k_cache.size(1), k_cache.size(2), k_cache.size(3),
          block_table.size(0), block_table.size(1), block_table.data_as<int32_t>()};
}

namespace {

void block_in_pool(const char* op, const CacheShape& cache, int64_t m, int64_t seq, int64_t p) {
  const int64_t block = cache.blocks[seq * cache.width + p / cache.block_size];
  MINFER_CHECK(block >= 0 && block < cache.n_blocks, op, ": row ", m, "'s position ", p, " is in block ", block,
               " of a pool of ", cache.n_blocks);
}

}  // namespace

void positions(const char* op, const int32_t* seq, const int32_t* pos, int64_t rows,
               const CacheShape& cache, bool keys, int64_t window) {
  for (int64_t m = 0; m < rows; ++m) {
    MINFER_CHECK(seq[m] >= 0 && seq[m] < cache.n_seqs, op, ": row ", m, " names sequence ", seq[m],
                 " of a block table for ", cache.n_seqs);
    MINFER_CHECK(pos[m] >= 0 && pos[m] < cache.n_ctx(), op, ": row ", m, " is at position ", pos[m],
                 " of a cache for ", cache.n_ctx());
    int64_t first = keys ? attention_first_key(pos[m], window) : pos[m];
    // A row after one of the same sequence at a position no later than its own needs only the
    // blocks past that row's position (the first key never moves back as the position grows):
    // a chunk of a prompt costs its keys' blocks once, not once per row.
    if (m > 0 && seq[m - 1] == seq[m] && pos[m - 1] <= pos[m]) first = std::max<int64_t>(first, pos[m - 1] + 1);
    for (int64_t p = first - first % cache.block_size; first <= pos[m] && p <= pos[m]; p += cache.block_size)
      block_in_pool(op, cache, m, seq[m], std::max<int64_t>(p, first));
  }
}

void rope_table(const char* op, const Tensor& table, int64_t head_dim, DeviceKind device) {
  on_device(op, "table", table, device);
  MINFER_CHECK(table.ndim() == 2 && table.dtype() == DType::f32 && table.is_contiguous() &&
                   table.size(1) == head_dim,
               op, ": the rope table must be f32[positions, ", head_dim, "], got ", table.str());
}

void head_dim(const char* op, const Rows& x, int64_t head_dim) {
  MINFER_CHECK(head_dim > 0 && head_dim % 2 == 0, op, ": head_dim ", head_dim,
               " must be even and positive");
  MINFER_CHECK(x.cols % head_dim == 0, op, ": ", x.cols, " features are not whole heads of ",
               head_dim);
}

void gather_rows(const Tensor& out, const Tensor& table, const Tensor& ids, DeviceKind device) {
  Rows o = activation("gather_rows", "out", out, device);
  weight("gather_rows", "table", table, device);
  MINFER_CHECK(table.size(1) == o.cols, "gather_rows: table ", table.str(), " rows are not ", o.cols,
               " wide");
  index_vector("gather_rows", "ids", ids, o.rows, device);
}

int64_t rmsnorm(const Tensor& out, const Tensor& x, const Tensor& weight, DeviceKind device) {
  Rows o = activation("rmsnorm", "out", out, device);
  same_rows("rmsnorm", o, "out", activation("rmsnorm", "x", x, device), "x");
  on_device("rmsnorm", "weight", weight, device);
  MINFER_CHECK(weight.ndim() == 1 && weight.dtype() == DType::f32 && weight.size(0) > 0 && o.cols > 0 &&
                   o.cols % weight.size(0) == 0 && weight.is_contiguous(),
               "rmsnorm: weight must be f32[", o.cols, "] or of a width that divides it, got ", weight.str());
  return o.cols / weight.size(0);
}

void matmul(const Tensor& out, const Tensor& x, const Tensor& w, DeviceKind device, bool packed_ok) {
  Rows o = activation("matmul", "out", out, device);
  Rows in = activation("matmul", "x", x, device);
  weight("matmul", "w", w, device);
  MINFER_CHECK(packed_ok || w.row_layout() == RowLayout::file, "matmul: w ", w.str(),
               " is packed for the CPU backend, which alone multiplies it");
  MINFER_CHECK(in.cols == w.size(1) && o.rows == in.rows && o.cols == w.size(0),
               "matmul: out [", o.rows, ", ", o.cols, "] = x [", in.rows, ", ", in.cols,
               "] * w^T with w ", w.str());
}

void rope(const Tensor& x, const Tensor& pos, const Tensor& table, int64_t head_dim,
          DeviceKind device) {
  Rows r = activation("rope", "x", x, device);
  op_checks::head_dim("rope", r, head_dim);
  index_vector("rope", "pos", pos, r.rows, device);
  rope_table("rope", table, head_dim, device);
}

void table_positions(const char* op, const int32_t* pos, int64_t rows, const Tensor& table) {
  for (int64_t m = 0; m < rows; ++m)
    MINFER_CHECK(pos[m] >= 0 && pos[m] < table.size(0), op, ": position ", pos[m],
                 " outside the rope table of ", table.size(0));
}

void residual_rmsnorm(const Tensor& out, const Tensor& x, const Tensor& delta, const Tensor& weight,
                      DeviceKind device) {
  MINFER_CHECK(rmsnorm(out, x, weight, device) == 1, "residual_rmsnorm: weight ", weight.str(), " must be as wide as x ",
               x.str());
  same_rows("residual_rmsnorm", activation("residual_rmsnorm", "x", x, device), "x",
            activation("residual_rmsnorm", "delta", delta, device), "delta");
}

CacheShape kv_store(const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table,
                    const Tensor& k, const Tensor& v, const Tensor& seq, const Tensor& pos,
                    DeviceKind device) {
  CacheShape cache = kv_cache("kv_store", k_cache, v_cache, block_table, device);
  Rows kr = activation("kv_store", "k", k, device);
  same_rows("kv_store", kr, "k", activation("kv_store", "v", v, device), "v");
  MINFER_CHECK(kr.cols == cache.kv_dim(), "kv_store: k has ", kr.cols, " features, the cache ",
               cache.kv_dim());
  index_vector("kv_store", "seq", seq, kr.rows, device);
  index_vector("kv_store", "pos", pos, kr.rows, device);
  return cache;
}

CacheShape rope_kv_store(const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table,
                         const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& seq,
                         const Tensor& pos, const Tensor& table, int64_t head_dim, DeviceKind device) {
  rope(q, pos, table, head_dim, device);
  rope(k, pos, table, head_dim, device);
  CacheShape cache = kv_store(k_cache, v_cache, block_table, k, v, seq, pos, device);
  MINFER_CHECK(q.size(0) == k.size(0), "rope_kv_store: q has ", q.size(0), " rows, k ", k.size(0));
  MINFER_CHECK(cache.head_dim == head_dim, "rope_kv_store: the cache holds heads of ",
               cache.head_dim, ", not ", head_dim);
  return cache;
}

AttentionShape attention(const Tensor& out, const Tensor& q, const Tensor& k_cache,
                         const Tensor& v_cache, const Tensor& block_table, const Tensor& seq,
                         const Tensor& pos, const AttentionSpec& spec, DeviceKind device) {
  const int64_t head_dim = spec.head_dim;
  Rows o = activation("attention", "out", out, device);
  Rows qr = activation("attention", "q", q, device);
  same_rows("attention", o, "out", qr, "q");
  op_checks::head_dim("attention", qr, head_dim);
  CacheShape cache = kv_cache("attention", k_cache, v_cache, block_table, device);
  MINFER_CHECK(cache.head_dim == head_dim, "attention: the cache holds heads of ", cache.head_dim,
               ", q heads of ", head_dim);
  AttentionShape s{qr.rows, qr.cols / head_dim, cache.n_kv_heads, head_dim, cache};
  MINFER_CHECK(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0, "attention: ", s.n_heads,
               " query heads cannot share ", s.n_kv_heads, " KV heads");
  MINFER_CHECK(spec.window >= 0 && spec.scale >= 0.0f && std::isfinite(spec.scale), "attention: a window of ",
               spec.window, " keys and a scale of ", spec.scale);
  index_vector("attention", "seq", seq, qr.rows, device);
  index_vector("attention", "pos", pos, qr.rows, device);
  return s;
}

void elementwise(const char* op, const Tensor& out, const Tensor& a, const Tensor& b,
                 DeviceKind device) {
  Rows o = activation(op, "out", out, device);
  same_rows(op, o, "out", activation(op, "a", a, device), "a");
  same_rows(op, o, "out", activation(op, "b", b, device), "b");
}

int64_t glu(const Tensor& out, const Tensor& gate, const Tensor& up, DeviceKind device) {
  Rows o = activation("glu", "out", out, device);
  same_rows("glu", o, "out", activation("glu", "up", up, device), "up");
  Rows g = activation("glu", "gate", gate, device);
  MINFER_CHECK(g.rows == o.rows && (g.cols == o.cols || g.cols == 1), "glu: gate is [", g.rows, ", ", g.cols,
               "] but out is [", o.rows, ", ", o.cols, "] (a gate is as wide, or one column)");
  return g.cols == o.cols ? 1 : 0;
}

namespace {
// An i32 or f32 (M, k) tensor, contiguous.
void slot_table(const char* op, const char* name, const Tensor& t, DType dtype, int64_t M, int64_t k,
                DeviceKind device) {
  on_device(op, name, t, device);
  MINFER_CHECK(t.ndim() == 2 && t.dtype() == dtype && t.size(0) == M && t.size(1) == k && t.is_contiguous(), op,
               ": ", name, " must be a contiguous ", dtype_name(dtype), " [", M, ", ", k, "], got ", t.str());
}
}  // namespace

void route_experts(const Tensor& ids, const Tensor& weights, const Tensor& logits, DeviceKind device) {
  Rows l = activation("route_experts", "logits", logits, device);
  MINFER_CHECK(l.cols <= ref::kMaxExperts, "route_experts: ", l.cols, " experts, more than ", ref::kMaxExperts);
  MINFER_CHECK(ids.ndim() == 2 && ids.size(1) > 0 && ids.size(1) <= l.cols, "route_experts: ids ", ids.str(),
               " must choose 1 to ", l.cols, " experts a row");
  slot_table("route_experts", "ids", ids, DType::i32, l.rows, ids.size(1), device);
  slot_table("route_experts", "weights", weights, DType::f32, l.rows, ids.size(1), device);
}

ExpertsShape matmul_experts(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& ids,
                            const Tensor& weights, DeviceKind device, bool packed_ok) {
  const char* op = "matmul_experts";
  on_device(op, "w", w, device);
  MINFER_CHECK(w.ndim() == 3 && w.dtype() != DType::i32 && w.is_contiguous() && w.size(0) > 0, op,
               ": w must be a dense (experts, N, K) float or quantized tensor, got ", w.str());
  MINFER_CHECK(packed_ok || w.row_layout() == RowLayout::file, op, ": w ", w.str(),
               " is packed for the CPU backend, which alone multiplies it");
  MINFER_CHECK(ids.ndim() == 2 && ids.size(1) > 0, op, ": ids must be i32 [rows, slots], got ", ids.str());
  ExpertsShape s{ids.size(0), ids.size(1), w.size(0), w.size(1), w.size(2), false};
  slot_table(op, "ids", ids, DType::i32, s.M, s.k, device);
  Rows in = activation(op, "x", x, device), o = activation(op, "out", out, device);
  s.x_per_slot = in.rows != s.M || s.k == 1;
  MINFER_CHECK(in.cols == s.K && (in.rows == s.M || in.rows == s.M * s.k), op, ": x [", in.rows, ", ", in.cols,
               "] must have ", s.M, " or ", s.M * s.k, " rows of ", s.K, " for ids ", ids.str(), " and w ", w.str());
  if (weights.defined()) slot_table(op, "weights", weights, DType::f32, s.M, s.k, device);
  const int64_t out_rows = weights.defined() ? s.M : s.M * s.k;
  MINFER_CHECK(o.rows == out_rows && o.cols == s.N, op, ": out is [", o.rows, ", ", o.cols, "] but must be [",
               out_rows, ", ", s.N, "]", weights.defined() ? " (weighted: a row per row)" : " (a row per slot)");
  return s;
}

void expert_ids(const char* op, const int32_t* ids, int64_t n, int64_t E) {
  for (int64_t i = 0; i < n; ++i)
    MINFER_CHECK(ids[i] >= 0 && ids[i] < E, op, ": id ", ids[i], " at slot ", i, " names no expert of ", E);
}

int64_t add(const Tensor& out, const Tensor& a, const Tensor& b, DeviceKind device) {
  if (b.ndim() != 1) {
    elementwise("add", out, a, b, device);
    return ld(b);
  }
  Rows o = activation("add", "out", out, device);
  same_rows("add", o, "out", activation("add", "a", a, device), "a");
  on_device("add", "b", b, device);
  MINFER_CHECK(b.dtype() == DType::f32 && b.size(0) == o.cols && b.is_contiguous(), "add: b must be f32[", o.cols,
               "] or f32 [", o.rows, ", ", o.cols, "], got ", b.str());
  return 0;
}

void argmax(const Tensor& out, const Tensor& x, DeviceKind device) {
  Rows r = activation("argmax", "x", x, device);
  MINFER_CHECK(r.cols > 0, "argmax: x has no columns");
  index_vector("argmax", "out", out, r.rows, device);
}

void fill(const Tensor& t, DeviceKind device) {
  on_device("fill_uniform", "t", t, device);
  MINFER_CHECK(t.is_contiguous() && t.dtype() != DType::i32,
               "fill_uniform: needs a contiguous float tensor, got ", t.str());
}

void sum(const Tensor& out, const Tensor& x, DeviceKind device) {
  on_device("sum", "x", x, device);
  on_device("sum", "out", out, device);
  MINFER_CHECK(x.dtype() == DType::f32 && x.is_contiguous(), "sum: x must be contiguous f32, got ", x.str());
  MINFER_CHECK(reinterpret_cast<uintptr_t>(x.data()) % kSumAlignment == 0, "sum: x ", x.str(), " starts ",
               reinterpret_cast<uintptr_t>(x.data()) % kSumAlignment, " bytes past a ", kSumAlignment,
               "-byte boundary");
  MINFER_CHECK(out.dtype() == DType::f32 && out.numel() == 1, "sum: out must be f32[1], got ", out.str());
}

}  // namespace minfer::op_checks
