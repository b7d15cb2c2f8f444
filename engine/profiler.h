// A backend that runs another backend's ops and times each one: wrap the backend a model runs
// on, and report() says where a forward pass spends its time, op by op. Every op waits for the
// device before and after (on CUDA that serialises the stream, so totals are per op, not the
// pipelined total). `minfer bench --profile` uses it, and the `launch` lesson to count a step's ops.
#pragma once

#include <chrono>
#include <map>
#include <string>

#include "engine/backend.h"

namespace minfer {

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(Backend& inner) : inner_(inner) {}
  DeviceKind device() const override { return inner_.device(); }
  BackendKind kind() const override { return inner_.kind(); }
  std::string name() const override { return inner_.name(); }
  int cpu_threads() const override { return inner_.cpu_threads(); }
  CachingPool& pool() override { return inner_.pool(); }
  CachingPool& host_pool() override { return inner_.host_pool(); }
  void synchronize() override { inner_.synchronize(); }
  Tensor pack_weights(const Tensor& w) override { return inner_.pack_weights(w); }

  void gather_rows(const Tensor& out, const Tensor& table, const Tensor& ids, float scale) override;
  void rmsnorm(const Tensor& out, const Tensor& x, const Tensor& weight, float eps) override;
  void residual_rmsnorm(const Tensor& out, const Tensor& x, const Tensor& delta, const Tensor& weight,
                        float eps) override;
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

  void reset() { totals_.clear(); }
  int64_t calls() const;  // ops run since the last reset
  // A table of op, calls, total ms and share of the total, largest first.
  std::string report() const;

 private:
  struct Total {
    int64_t calls = 0;
    double seconds = 0.0;
  };
  template <class Fn>
  void timed(const std::string& op, Fn&& fn);

  Backend& inner_;
  std::map<std::string, Total> totals_;
};

}  // namespace minfer
