#include "engine/profiler.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace minfer {

template <class Fn>
void ProfilingBackend::timed(const std::string& op, Fn&& fn) {
  inner_.synchronize();
  auto start = std::chrono::steady_clock::now();
  fn();
  inner_.synchronize();
  Total& t = totals_[op];
  ++t.calls;
  t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

namespace {
// "matmul [16, 288] x [1536, 288]^T f32", "... q4_0 packed16": the shapes, the weight type and
// its row layout (core/tensor.h) tell the products apart.
std::string matmul_label(const Tensor& x, const Tensor& w) {
  char text[100];
  std::snprintf(text, sizeof(text), "matmul [%lld, %lld] x [%lld, %lld]^T %s%s", static_cast<long long>(x.size(0)),
                static_cast<long long>(x.size(1)), static_cast<long long>(w.size(0)),
                static_cast<long long>(w.size(1)), dtype_name(w.dtype()),
                w.row_layout() == RowLayout::packed16 ? " packed16" : "");
  return text;
}
}  // namespace

void ProfilingBackend::gather_rows(const Tensor& out, const Tensor& table, const Tensor& ids, float scale) {
  timed("gather_rows", [&] { inner_.gather_rows(out, table, ids, scale); });
}
void ProfilingBackend::rmsnorm(const Tensor& out, const Tensor& x, const Tensor& weight, float eps) {
  timed("rmsnorm", [&] { inner_.rmsnorm(out, x, weight, eps); });
}
void ProfilingBackend::residual_rmsnorm(const Tensor& out, const Tensor& x, const Tensor& delta,
                                        const Tensor& weight, float eps) {
  timed("residual_rmsnorm", [&] { inner_.residual_rmsnorm(out, x, delta, weight, eps); });
}
void ProfilingBackend::matmul(const Tensor& out, const Tensor& x, const Tensor& w) {
  timed(matmul_label(x, w), [&] { inner_.matmul(out, x, w); });
}
void ProfilingBackend::rope(const Tensor& x, const Tensor& pos, const Tensor& table, int64_t head_dim) {
  timed("rope", [&] { inner_.rope(x, pos, table, head_dim); });
}
void ProfilingBackend::kv_store(const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table,
                                const Tensor& k, const Tensor& v, const Tensor& seq, const Tensor& pos) {
  timed("kv_store", [&] { inner_.kv_store(k_cache, v_cache, block_table, k, v, seq, pos); });
}
void ProfilingBackend::rope_kv_store(const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table,
                                     const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& seq,
                                     const Tensor& pos, const Tensor& table, int64_t head_dim) {
  timed("rope_kv_store",
        [&] { inner_.rope_kv_store(k_cache, v_cache, block_table, q, k, v, seq, pos, table, head_dim); });
}
void ProfilingBackend::attention(const Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                 const Tensor& block_table, const Tensor& seq, const Tensor& pos,
                                 const AttentionSpec& spec, AttentionAlgorithm algorithm) {
  timed(std::string("attention (") + attention_algorithm_name(algorithm) + ")",
        [&] { inner_.attention(out, q, k_cache, v_cache, block_table, seq, pos, spec, algorithm); });
}
void ProfilingBackend::glu(const Tensor& out, const Tensor& gate, const Tensor& up, GluActivation activation) {
  timed(std::string("glu (") + glu_activation_name(activation) + ")", [&] { inner_.glu(out, gate, up, activation); });
}
void ProfilingBackend::route_experts(const Tensor& ids, const Tensor& weights, const Tensor& logits, bool normalize) {
  timed("route_experts", [&] { inner_.route_experts(ids, weights, logits, normalize); });
}
void ProfilingBackend::matmul_experts(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& ids,
                                      const Tensor& weights) {
  timed(std::string("matmul_experts (") + dtype_name(w.dtype()) + ")",
        [&] { inner_.matmul_experts(out, x, w, ids, weights); });
}
void ProfilingBackend::add(const Tensor& out, const Tensor& a, const Tensor& b) {
  timed("add", [&] { inner_.add(out, a, b); });
}
void ProfilingBackend::argmax(const Tensor& out, const Tensor& x) {
  timed("argmax", [&] { inner_.argmax(out, x); });
}
void ProfilingBackend::sum(const Tensor& out, const Tensor& x) {
  timed("sum", [&] { inner_.sum(out, x); });
}
void ProfilingBackend::fill_uniform(const Tensor& t, uint64_t seed, float lo, float hi) {
  timed("fill_uniform", [&] { inner_.fill_uniform(t, seed, lo, hi); });
}

int64_t ProfilingBackend::calls() const {
  int64_t n = 0;
  for (const auto& [op, t] : totals_) n += t.calls;
  return n;
}

std::string ProfilingBackend::report() const {
  std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0.0;
  for (const auto& r : rows) total += r.second.seconds;
  std::string out = "| op | calls | total ms | share |\n| -- | ----: | -------: | ----: |\n";
  char line[200];
  for (const auto& [op, t] : rows) {
    std::snprintf(line, sizeof(line), "| %s | %lld | %.2f | %.1f%% |\n", op.c_str(), static_cast<long long>(t.calls),
                  t.seconds * 1e3, total > 0 ? 100.0 * t.seconds / total : 0.0);
    out += line;
  }
  return out;
}

}  // namespace minfer
