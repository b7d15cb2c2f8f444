#include "engine/backend_ref.h"

#include "core/error.h"
#include "engine/op_checks.h"
#include "kernels/ref/add.h"
#include "kernels/ref/argmax.h"
#include "kernels/ref/attention.h"
#include "kernels/ref/gather_rows.h"
#include "kernels/ref/fill.h"
#include "kernels/ref/kv_store.h"
#include "kernels/ref/matmul.h"
#include "kernels/ref/matmul_experts.h"
#include "kernels/ref/rmsnorm.h"
#include "kernels/ref/rope.h"
#include "kernels/ref/route_experts.h"
#include "kernels/ref/sum.h"
#include "kernels/ref/glu.h"

namespace minfer {

namespace checks = op_checks;
using op_checks::f32;
using op_checks::i32;
using op_checks::ld;
constexpr DeviceKind kHost = DeviceKind::cpu;

RefBackend::RefBackend() : pool_(std::make_unique<HostUpstream>()) {}

void RefBackend::gather_rows(const Tensor& out, const Tensor& table, const Tensor& ids, float scale) {
  checks::gather_rows(out, table, ids, kHost);
  ref::gather_rows(f32(out), ld(out), table.data(), table.dtype(), i32(ids), out.size(0), out.size(1),
                 table.size(0), scale);
}

void RefBackend::rmsnorm(const Tensor& out, const Tensor& x, const Tensor& weight, float eps) {
  const int64_t groups = checks::rmsnorm(out, x, weight, kHost);
  ref::rmsnorm(f32(out), ld(out), f32(x), ld(x), f32(weight), x.size(0), weight.size(0), eps, groups);
}

// The fused op is its definition: the add, then the norm.
void RefBackend::residual_rmsnorm(const Tensor& out, const Tensor& x, const Tensor& delta,
                                  const Tensor& weight, float eps) {
  checks::residual_rmsnorm(out, x, delta, weight, kHost);
  ref::add(f32(x), ld(x), f32(x), ld(x), f32(delta), ld(delta), x.size(0), x.size(1));
  ref::rmsnorm(f32(out), ld(out), f32(x), ld(x), f32(weight), x.size(0), x.size(1), eps);
}

void RefBackend::matmul(const Tensor& out, const Tensor& x, const Tensor& w) {
  checks::matmul(out, x, w, kHost);
  ref::matmul(f32(out), ld(out), f32(x), ld(x), w.data(), w.dtype(), x.size(0), w.size(0), w.size(1));
}

void RefBackend::rope(const Tensor& x, const Tensor& pos, const Tensor& table, int64_t head_dim) {
  checks::rope(x, pos, table, head_dim, kHost);
  checks::table_positions("rope", i32(pos), x.size(0), table);
  ref::rope(f32(x), ld(x), i32(pos), f32(table), x.size(0), x.size(1) / head_dim, head_dim);
}

void RefBackend::kv_store(const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table,
                          const Tensor& k, const Tensor& v, const Tensor& seq, const Tensor& pos) {
  auto cache = checks::kv_store(k_cache, v_cache, block_table, k, v, seq, pos, kHost);
  checks::positions("kv_store", i32(seq), i32(pos), k.size(0), cache);
  ref::kv_store(k_cache.data(), v_cache.data(), k_cache.dtype(), f32(k), ld(k), f32(v), ld(v),
                i32(seq), i32(pos), k.size(0), cache.n_kv_heads, cache.head_dim, cache.table());
}

// The fused op is its definition: rotate q and k, then store k and v.
void RefBackend::rope_kv_store(const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table,
                               const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& seq,
                               const Tensor& pos, const Tensor& table, int64_t head_dim) {
  checks::rope_kv_store(k_cache, v_cache, block_table, q, k, v, seq, pos, table, head_dim, kHost);
  rope(q, pos, table, head_dim);
  rope(k, pos, table, head_dim);
  kv_store(k_cache, v_cache, block_table, k, v, seq, pos);
}

// Both algorithms compute the same function; the reference computes it directly (kernels/ref/
// attention.h), so `algorithm` changes nothing here.
void RefBackend::attention(const Tensor& out, const Tensor& q, const Tensor& k_cache,
                           const Tensor& v_cache, const Tensor& block_table, const Tensor& seq,
                           const Tensor& pos, const AttentionSpec& spec, AttentionAlgorithm) {
  auto s = checks::attention(out, q, k_cache, v_cache, block_table, seq, pos, spec, kHost);
  checks::positions("attention", i32(seq), i32(pos), s.M, s.cache, true, spec.window);
  ref::attention(f32(out), ld(out), f32(q), ld(q), k_cache.data(), v_cache.data(), k_cache.dtype(),
                 s.cache.table(), i32(seq), i32(pos), s.M, s.n_heads, s.n_kv_heads, s.head_dim, spec.score_scale(),
                 spec.window);
}

void RefBackend::glu(const Tensor& out, const Tensor& gate, const Tensor& up, GluActivation activation) {
  const int64_t gate_step = checks::glu(out, gate, up, kHost);
  ref::glu(f32(out), ld(out), f32(gate), ld(gate), gate_step, f32(up), ld(up), out.size(0), out.size(1), activation);
}

void RefBackend::route_experts(const Tensor& ids, const Tensor& weights, const Tensor& logits, bool normalize) {
  checks::route_experts(ids, weights, logits, kHost);
  ref::route_experts(ids.data_as<int32_t>(), f32(weights), f32(logits), ld(logits), logits.size(0), logits.size(1),
                     ids.size(1), normalize);
}

void RefBackend::matmul_experts(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& ids,
                                const Tensor& weights) {
  const auto s = checks::matmul_experts(out, x, w, ids, weights, kHost);
  checks::expert_ids("matmul_experts", i32(ids), s.M * s.k, s.E);
  ref::matmul_experts(f32(out), ld(out), f32(x), ld(x), s.x_per_slot, w.data(), w.dtype(), i32(ids),
                      weights.defined() ? f32(weights) : nullptr, s.M, s.k, s.E, s.N, s.K);
}

void RefBackend::add(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t ld_b = checks::add(out, a, b, kHost);
  ref::add(f32(out), ld(out), f32(a), ld(a), f32(b), ld_b, out.size(0), out.size(1));
}

void RefBackend::argmax(const Tensor& out, const Tensor& x) {
  checks::argmax(out, x, kHost);
  ref::argmax(out.data_as<int32_t>(), f32(x), ld(x), x.size(0), x.size(1));
}

void RefBackend::sum(const Tensor& out, const Tensor& x) {
  checks::sum(out, x, kHost);
  ref::sum(f32(out), f32(x), x.numel());
}

void RefBackend::fill_uniform(const Tensor& t, uint64_t seed, float lo, float hi) {
  checks::fill(t, kHost);
  ref::fill_uniform(t.data(), t.dtype(), t.numel(), seed, lo, hi);
}

}  // namespace minfer
