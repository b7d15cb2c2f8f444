#include "engine/backend_cpu.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "engine/op_checks.h"
#include "kernels/cpu/add.h"
#include "kernels/cpu/argmax.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gather_rows.h"
#include "kernels/cpu/fill.h"
#include "kernels/cpu/kv_store.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_experts.h"
#include "kernels/cpu/quant/packed.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/route_experts.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/sum.h"
#include "kernels/cpu/glu.h"

namespace minfer {

namespace checks = op_checks;
using op_checks::f32;
using op_checks::i32;
using op_checks::ld;
constexpr DeviceKind kCpu = DeviceKind::cpu;
static_assert(cpu::kPackRows == kPackedGroupRows, "RowLayout::packed16 is the packed kernels' layout");

namespace {

void require_cpu_cache(const char* op, const Tensor& cache) {
  MINFER_CHECK(cache.dtype() == DType::f32 || cache.dtype() == DType::f16, op,
               ": the CPU backend keeps an f32 or f16 KV cache, got ", cache.str());
}
}  // namespace

CpuBackend::CpuBackend(const BackendOptions& options)
    : pool_(std::make_unique<HostUpstream>()),
      threads_(options.threads, options.spin_us),
      batch_invariant_(options.batch_invariant) {}

std::string CpuBackend::name() const {
  return detail::concat("cpu (", threads_.size(), " threads, ", cpu::simd::name(),
                        batch_invariant_ ? ", batch-invariant" : "", ")");
}

Tensor CpuBackend::pack_weights(const Tensor& w) {
  if (w.row_layout() != RowLayout::file || !cpu::packs(w.dtype())) return w;
  if (w.ndim() == 3) {  // experts' matrices (matmul_experts), each packed on its own
    for (int64_t e = 0; e < w.size(0); ++e) pack_weights(w.select(0, e));
    return w.with_row_layout(RowLayout::packed16);
  }
  MINFER_CHECK(w.device() == kCpu && w.ndim() == 2 && w.is_contiguous(), "pack_weights: ", w.str(),
               " is not a dense matrix in host memory");
  // note: rows from a multiple of 16 on pack as they do in the whole matrix (packed.h), so each
  // thread packs chunks of 1024 rows through a buffer of its own instead of a copy of w.
  const int64_t N = w.size(0), K = w.size(1), chunk = 64 * kPackedGroupRows;
  const auto row_bytes = static_cast<int64_t>(dtype_bytes(w.dtype(), uint64_t(K)));
  char* bytes = static_cast<char*>(w.data());
  threads_.parallel_for((N + chunk - 1) / chunk, 1, [&](int64_t c0, int64_t c1) {
    std::vector<char> buffer(size_t(std::min(chunk, N - c0 * chunk) * row_bytes));
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t rows = std::min(chunk, N - c * chunk);
      cpu::pack_rows(w.dtype(), buffer.data(), bytes + c * chunk * row_bytes, rows, K);
      std::memcpy(bytes + c * chunk * row_bytes, buffer.data(), size_t(rows * row_bytes));
    }
  });
  return w.with_row_layout(RowLayout::packed16);
}

void CpuBackend::gather_rows(const Tensor& out, const Tensor& table, const Tensor& ids, float scale) {
  checks::gather_rows(out, table, ids, kCpu);
  cpu::gather_rows(threads_, f32(out), ld(out), table.data(), table.dtype(), table.row_layout() == RowLayout::packed16,
                   i32(ids), out.size(0), out.size(1), table.size(0), scale);
}

void CpuBackend::rmsnorm(const Tensor& out, const Tensor& x, const Tensor& weight, float eps) {
  const int64_t groups = checks::rmsnorm(out, x, weight, kCpu);
  cpu::rmsnorm(threads_, f32(out), ld(out), f32(x), ld(x), f32(weight), x.size(0), weight.size(0), eps, groups);
}

void CpuBackend::residual_rmsnorm(const Tensor& out, const Tensor& x, const Tensor& delta,
                                  const Tensor& weight, float eps) {
  checks::residual_rmsnorm(out, x, delta, weight, kCpu);
  cpu::residual_rmsnorm(threads_, f32(out), ld(out), f32(x), ld(x), f32(delta), ld(delta),
                        f32(weight), x.size(0), x.size(1), eps);
}

void CpuBackend::matmul(const Tensor& out, const Tensor& x, const Tensor& w) {
  checks::matmul(out, x, w, kCpu, true);
  if (w.row_layout() == RowLayout::packed16)  // one kernel for every M: batch-invariant by construction
    return cpu::matmul_packed(threads_, f32(out), ld(out), f32(x), ld(x), w.data(), w.dtype(), x.size(0), w.size(0),
                              w.size(1));
  cpu::matmul(threads_, f32(out), ld(out), f32(x), ld(x), w.data(), w.dtype(), x.size(0),
              w.size(0), w.size(1), batch_invariant_);
}

void CpuBackend::rope(const Tensor& x, const Tensor& pos, const Tensor& table, int64_t head_dim) {
  checks::rope(x, pos, table, head_dim, kCpu);
  checks::table_positions("rope", i32(pos), x.size(0), table);
  cpu::rope(threads_, f32(x), ld(x), i32(pos), f32(table), x.size(0), x.size(1) / head_dim,
            head_dim);
}

void CpuBackend::kv_store(const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table,
                          const Tensor& k, const Tensor& v, const Tensor& seq, const Tensor& pos) {
  auto cache = checks::kv_store(k_cache, v_cache, block_table, k, v, seq, pos, kCpu);
  require_cpu_cache("kv_store", k_cache);
  checks::positions("kv_store", i32(seq), i32(pos), k.size(0), cache);
  cpu::kv_store(threads_, k_cache.data(), v_cache.data(), k_cache.dtype(), f32(k), ld(k), f32(v), ld(v), i32(seq),
                i32(pos), k.size(0), cache.n_kv_heads, cache.head_dim, cache.table());
}

void CpuBackend::rope_kv_store(const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table,
                               const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& seq,
                               const Tensor& pos, const Tensor& table, int64_t head_dim) {
  auto cache = checks::rope_kv_store(k_cache, v_cache, block_table, q, k, v, seq, pos, table, head_dim, kCpu);
  require_cpu_cache("rope_kv_store", k_cache);
  checks::positions("rope_kv_store", i32(seq), i32(pos), k.size(0), cache);
  checks::table_positions("rope_kv_store", i32(pos), k.size(0), table);
  cpu::rope_kv_store(threads_, k_cache.data(), v_cache.data(), k_cache.dtype(), f32(q), ld(q), f32(k), ld(k), f32(v),
                     ld(v), i32(seq), i32(pos), f32(table), q.size(0), q.size(1) / head_dim,
                     k.size(1) / head_dim, head_dim, cache.table());
}

void CpuBackend::attention(const Tensor& out, const Tensor& q, const Tensor& k_cache,
                           const Tensor& v_cache, const Tensor& block_table, const Tensor& seq,
                           const Tensor& pos, const AttentionSpec& spec, AttentionAlgorithm algorithm) {
  auto s = checks::attention(out, q, k_cache, v_cache, block_table, seq, pos, spec, kCpu);
  require_cpu_cache("attention", k_cache);
  checks::positions("attention", i32(seq), i32(pos), s.M, s.cache, true, spec.window);
  auto run = algorithm == AttentionAlgorithm::online_softmax
                 ? cpu::attention<AttentionAlgorithm::online_softmax>
                 : cpu::attention<AttentionAlgorithm::three_pass>;
  run(threads_, {f32(out), ld(out), f32(q), ld(q), k_cache.data(), v_cache.data(), k_cache.dtype(), s.cache.table(),
                 i32(seq), i32(pos), s.M, s.n_heads, s.n_kv_heads, s.head_dim, spec.score_scale(), spec.window});
}

void CpuBackend::glu(const Tensor& out, const Tensor& gate, const Tensor& up, GluActivation activation) {
  const int64_t gate_step = checks::glu(out, gate, up, kCpu);
  cpu::glu(threads_, f32(out), ld(out), f32(gate), ld(gate), gate_step, f32(up), ld(up), out.size(0), out.size(1),
           activation);
}

void CpuBackend::route_experts(const Tensor& ids, const Tensor& weights, const Tensor& logits, bool normalize) {
  checks::route_experts(ids, weights, logits, kCpu);
  cpu::route_experts(threads_, ids.data_as<int32_t>(), f32(weights), f32(logits), ld(logits), logits.size(0),
                     logits.size(1), ids.size(1), normalize);
}

// note: an expert's matrix is one (N, K) matrix of w, packed on its own (pack_weights packs each
// expert apart), so its rows' products are matmul's.
void CpuBackend::matmul_experts(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& ids,
                                const Tensor& weights) {
  const auto s = checks::matmul_experts(out, x, w, ids, weights, kCpu, true);
  checks::expert_ids("matmul_experts", i32(ids), s.M * s.k, s.E);
  const bool packed = w.row_layout() == RowLayout::packed16;
  const auto expert_bytes = static_cast<int64_t>(dtype_bytes(w.dtype(), uint64_t(s.N) * uint64_t(s.K)));
  const char* bytes = static_cast<const char*>(w.data());
  cpu::matmul_experts(threads_, f32(out), ld(out), f32(x), ld(x), s.x_per_slot, i32(ids),
                      weights.defined() ? f32(weights) : nullptr, s.M, s.k, s.E, s.N, s.K,
                      [&](int64_t e, float* y, int64_t ld_y, const float* xe, int64_t ld_xe, int64_t rows) {
                        const void* we = bytes + e * expert_bytes;
                        if (packed)
                          cpu::matmul_packed(threads_, y, ld_y, xe, ld_xe, we, w.dtype(), rows, s.N, s.K);
                        else
                          cpu::matmul(threads_, y, ld_y, xe, ld_xe, we, w.dtype(), rows, s.N, s.K, batch_invariant_);
                      });
}

void CpuBackend::add(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t ld_b = checks::add(out, a, b, kCpu);
  cpu::add(threads_, f32(out), ld(out), f32(a), ld(a), f32(b), ld_b, out.size(0), out.size(1));
}

void CpuBackend::argmax(const Tensor& out, const Tensor& x) {
  checks::argmax(out, x, kCpu);
  cpu::argmax(threads_, out.data_as<int32_t>(), f32(x), ld(x), x.size(0), x.size(1));
}

void CpuBackend::sum(const Tensor& out, const Tensor& x) {
  checks::sum(out, x, kCpu);
  cpu::sum(threads_, f32(out), f32(x), x.numel());
}

void CpuBackend::fill_uniform(const Tensor& t, uint64_t seed, float lo, float hi) {
  checks::fill(t, kCpu);
  cpu::fill_uniform(threads_, t.data(), t.dtype(), t.numel(), seed, lo, hi);
}

}  // namespace minfer
