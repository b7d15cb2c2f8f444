// The CPU backend: Eigen and hand-written SIMD kernels from kernels/cpu/, a thread pool, and a
// caching pool over ordinary host memory. Quantized weights are repacked at load where this build
// has packed kernels for their type (pack_weights, kernels/cpu/quant/packed.h).
#pragma once

#include "engine/backend.h"

namespace minfer {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options);
  DeviceKind device() const override { return DeviceKind::cpu; }
  BackendKind kind() const override { return BackendKind::cpu; }
  std::string name() const override;
  int cpu_threads() const override { return threads_.size(); }
  CachingPool& pool() override { return pool_; }
  CachingPool& host_pool() override { return pool_; }
  ThreadPool& threads() { return threads_; }
  // Quantized matrices of the types cpu::packs() names become RowLayout::packed16.
  Tensor pack_weights(const Tensor& w) override;

  void gather_rows(const Tensor& out, const Tensor& table, const Tensor& ids, float scale) override;
  void rmsnorm(const Tensor& out, const Tensor& x, const Tensor& weight, float eps) override;
  void residual_rmsnorm(const Tensor& out, const Tensor& x, const Tensor& delta,
                        const Tensor& weight, float eps) override;
  void matmul(const Tensor& out, const Tensor& x, const Tensor& w) override;
  void rope(const Tensor& x, const Tensor& pos, const Tensor& table, int64_t head_dim) override;
  void kv_store(const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table, const Tensor& k,
                const Tensor& v, const Tensor& seq, const Tensor& pos) override;
  void rope_kv_store(const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table, const Tensor& q,
                     const Tensor& k, const Tensor& v, const Tensor& seq, const Tensor& pos, const Tensor& table,
                     int64_t head_dim) override;
  void attention(const Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                 const Tensor& block_table, const Tensor& seq, const Tensor& pos, const AttentionSpec& spec,
                 AttentionAlgorithm algorithm) override;
  void glu(const Tensor& out, const Tensor& gate, const Tensor& up, GluActivation activation) override;
  void route_experts(const Tensor& ids, const Tensor& weights, const Tensor& logits, bool normalize) override;
  void matmul_experts(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& ids,
                      const Tensor& weights) override;
  void add(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void argmax(const Tensor& out, const Tensor& x) override;
  void sum(const Tensor& out, const Tensor& x) override;
  void fill_uniform(const Tensor& t, uint64_t seed, float lo, float hi) override;

 private:
  CachingPool pool_;
  ThreadPool threads_;
  bool batch_invariant_;  // BackendOptions::batch_invariant
};

}  // namespace minfer
