// The reference backend (`--device ref`): every op is the plain loop of kernels/ref/, on one
// thread, accumulating in double. It is the readable tier of minfer, the one to step through in a
// debugger to follow a whole token, and the whole-model oracle the tests hold the CPU and CUDA
// backends to (tests/test_whole_model.cpp). It is slow on purpose: nothing here is tuned.
#pragma once

#include "engine/backend.h"

namespace minfer {

class RefBackend final : public Backend {
 public:
  RefBackend();
  DeviceKind device() const override { return DeviceKind::cpu; }
  BackendKind kind() const override { return BackendKind::ref; }
  std::string name() const override { return "ref (plain loops, double accumulation, 1 thread)"; }
  CachingPool& pool() override { return pool_; }
  CachingPool& host_pool() override { return pool_; }

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
};

}  // namespace minfer
