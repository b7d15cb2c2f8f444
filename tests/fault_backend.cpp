#include "tests/fault_backend.h"

#include "core/error.h"

namespace minfer::test {

FaultBackend::FaultBackend(std::unique_ptr<Backend> inner, std::unique_ptr<CachingPool> host_pool)
    : inner_(std::move(inner)), host_pool_(std::move(host_pool)) {}

FaultBackend::~FaultBackend() { recordings_.forget(""); }

void FaultBackend::synchronize() {
  if (fail_synchronize) fail("injected fault: cudaStreamSynchronize: an illegal memory access was encountered");
  inner_->synchronize();
}

void FaultBackend::enqueue(std::function<void()> op) {
  ++calls_;
  if (capturing_ != nullptr)
    capturing_->push_back(std::move(op));
  else
    op();
}

void* FaultBackend::capture(FunctionRef<void()> body) {
  auto recording = std::make_unique<Recording>();
  capturing_ = recording.get();
  try {
    body();
  } catch (...) {
    capturing_ = nullptr;
    throw;
  }
  capturing_ = nullptr;
  if (fail_next_capture) {
    fail_next_capture = false;
    fail("injected fault: cudaGraphInstantiate failed");
  }
  return recording.release();
}

void FaultBackend::launch(void* recording) {
  for (const auto& op : *static_cast<Recording*>(recording)) op();
}

void FaultBackend::destroy(void* recording) noexcept { delete static_cast<Recording*>(recording); }

void FaultBackend::copy_async(const Tensor& dst, const Tensor& src) {
  enqueue([=] { inner_->copy_async(dst, src); });
}

void FaultBackend::gather_rows(const Tensor& out, const Tensor& table, const Tensor& ids, float scale) {
  enqueue([=] { inner_->gather_rows(out, table, ids, scale); });
}

void FaultBackend::rmsnorm(const Tensor& out, const Tensor& x, const Tensor& weight, float eps) {
  enqueue([=] { inner_->rmsnorm(out, x, weight, eps); });
}

void FaultBackend::residual_rmsnorm(const Tensor& out, const Tensor& x, const Tensor& delta, const Tensor& weight,
                                    float eps) {
  enqueue([=] { inner_->residual_rmsnorm(out, x, delta, weight, eps); });
}

void FaultBackend::matmul(const Tensor& out, const Tensor& x, const Tensor& w) {
  enqueue([=] { inner_->matmul(out, x, w); });
}

void FaultBackend::rope(const Tensor& x, const Tensor& pos, const Tensor& table, int64_t head_dim) {
  enqueue([=] { inner_->rope(x, pos, table, head_dim); });
}

void FaultBackend::kv_store(const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table, const Tensor& k,
                            const Tensor& v, const Tensor& seq, const Tensor& pos) {
  enqueue([=] { inner_->kv_store(k_cache, v_cache, block_table, k, v, seq, pos); });
}

void FaultBackend::rope_kv_store(const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table,
                                 const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& seq,
                                 const Tensor& pos, const Tensor& table, int64_t head_dim) {
  enqueue([=] { inner_->rope_kv_store(k_cache, v_cache, block_table, q, k, v, seq, pos, table, head_dim); });
}

void FaultBackend::attention(const Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                             const Tensor& block_table, const Tensor& seq, const Tensor& pos,
                             const AttentionSpec& spec, AttentionAlgorithm algorithm) {
  enqueue([=] { inner_->attention(out, q, k_cache, v_cache, block_table, seq, pos, spec, algorithm); });
}

void FaultBackend::glu(const Tensor& out, const Tensor& gate, const Tensor& up, GluActivation activation) {
  enqueue([=] { inner_->glu(out, gate, up, activation); });
}
void FaultBackend::route_experts(const Tensor& ids, const Tensor& weights, const Tensor& logits, bool normalize) {
  enqueue([=] { inner_->route_experts(ids, weights, logits, normalize); });
}
void FaultBackend::matmul_experts(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& ids,
                                  const Tensor& weights) {
  enqueue([=] { inner_->matmul_experts(out, x, w, ids, weights); });
}

void FaultBackend::add(const Tensor& out, const Tensor& a, const Tensor& b) {
  enqueue([=] { inner_->add(out, a, b); });
}

void FaultBackend::argmax(const Tensor& out, const Tensor& x) {
  enqueue([=] { inner_->argmax(out, x); });
}

void FaultBackend::sum(const Tensor& out, const Tensor& x) {
  enqueue([=] { inner_->sum(out, x); });
}

void FaultBackend::fill_uniform(const Tensor& t, uint64_t seed, float lo, float hi) {
  enqueue([=] { inner_->fill_uniform(t, seed, lo, hi); });
}

}  // namespace minfer::test
