// A backend that runs another backend's ops and fails on demand, so that the error paths a GPU
// takes are tested on the host (as llama.cpp's test-alloc tests allocator logic with a fake
// backend):
//   - synchronize() throws while fail_synchronize is set, as CUDA_CHECK does after a sticky error;
//   - every op and copy is counted (calls());
//   - run_recorded records as a CUDA Graph does: a capture keeps each op and copy with its
//     arguments instead of running it, a launch runs what was kept, so a copy from host memory
//     reads it when launched; with fail_next_capture the capture throws once it has recorded
//     (a graph that fails to instantiate, thrown away);
//   - host_pool() is its own pool when one is given, so that a test sees the host memory held.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/recordings.h"

namespace minfer::test {

class FaultBackend final : public Backend, private Recorder {
 public:
  // Runs `inner`'s ops; host memory from `host_pool` when given, else from inner's host pool.
  explicit FaultBackend(std::unique_ptr<Backend> inner, std::unique_ptr<CachingPool> host_pool = nullptr);
  ~FaultBackend() override;

  bool fail_synchronize = false;
  bool fail_next_capture = false;
  int64_t calls() const { return calls_; }     // ops and copies called, recorded ones included
  const RecordingCache& recordings() const { return recordings_; }

  DeviceKind device() const override { return inner_->device(); }
  BackendKind kind() const override { return inner_->kind(); }
  std::string name() const override { return "fault (" + inner_->name() + ")"; }
  int cpu_threads() const override { return inner_->cpu_threads(); }
  CachingPool& pool() override { return inner_->pool(); }
  CachingPool& host_pool() override { return host_pool_ ? *host_pool_ : inner_->host_pool(); }
  void synchronize() override;
  void check_weights(DType t, const std::string& model) const override { inner_->check_weights(t, model); }
  Tensor pack_weights(const Tensor& w) override { return inner_->pack_weights(w); }

  void copy_async(const Tensor& dst, const Tensor& src) override;
  void run_recorded(const std::string& key, FunctionRef<void()> body) override { recordings_.run(key, body); }
  void forget_recordings(const std::string& prefix) override { recordings_.forget(prefix); }

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

 private:
  using Recording = std::vector<std::function<void()>>;
  // Runs `op` now, or keeps it in the recording being captured.
  void enqueue(std::function<void()> op);
  void* capture(FunctionRef<void()> body) override;
  void launch(void* recording) override;
  void destroy(void* recording) noexcept override;

  std::unique_ptr<Backend> inner_;
  std::unique_ptr<CachingPool> host_pool_;
  Recording* capturing_ = nullptr;
  int64_t calls_ = 0;
  RecordingCache recordings_{*this};
};

}  // namespace minfer::test
