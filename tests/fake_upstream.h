// An upstream for the caching pool that records every segment and fails on demand (in the manner
// of llama.cpp's test-alloc): out of memory at its k-th allocation or past a capacity, or a device
// error at a chosen allocation, reported as the CUDA upstreams report one (refused_allocation).
// tests/test_pool.cpp tests the pool with it; other tests give it to a pool whose memory they watch.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "core/pool.h"

namespace minfer::test {

class FakeUpstream final : public Upstream {
 public:
  struct Counters {
    int allocs = 0, frees = 0, failures = 0;
    size_t live_bytes = 0;  // held by the pool: allocated and not yet given back
  };
  static constexpr size_t kDefaultCapacity = size_t(1) << 30;
  // Out of memory at the fail_at-th allocation (1-based; -1: never) and past `capacity` bytes.
  FakeUpstream(Counters* counters, int fail_at = -1, size_t capacity = kDefaultCapacity)
      : counters_(counters), fail_at_(fail_at), capacity_(capacity) {}
  ~FakeUpstream() override { EXPECT_EQ(counters_->live_bytes, 0u) << "segments leaked"; }

  void* allocate(size_t bytes) override {
    ++attempts_;
    const bool device_error = attempts_ == device_error_at_;
    if (device_error || attempts_ == fail_at_ || counters_->live_bytes + bytes > capacity_) {
      ++counters_->failures;
      return refused_allocation(!device_error, "fakeMalloc", bytes, "fakeErrorIllegalAddress",
                                "an illegal memory access was encountered");
    }
    void* p = std::aligned_alloc(256, bytes);
    if (p == nullptr) {
      ++counters_->failures;
      return nullptr;
    }
    ++counters_->allocs;
    counters_->live_bytes += bytes;
    return p;
  }
  Release deallocate(void* p, size_t bytes) noexcept override {
    ++counters_->frees;
    counters_->live_bytes -= bytes;
    std::free(p);
    return release_;
  }
  // What deallocate() reports from now on (the memory is freed either way, so nothing leaks).
  void report(Release r) { release_ = r; }
  // The attempt-th allocation (1-based, counting every allocation so far) fails with a device
  // error, as after an earlier kernel's fault, instead of running out of memory.
  void device_error_at(int attempt) { device_error_at_ = attempt; }
  std::string name() const override { return "fake"; }
  bool memory_info(size_t* free_bytes, size_t* total_bytes) const override {
    *total_bytes = capacity_;
    *free_bytes = capacity_ - counters_->live_bytes;
    return true;
  }

 private:
  Counters* counters_;
  int attempts_ = 0;
  int fail_at_;
  int device_error_at_ = -1;
  size_t capacity_;
  Release release_ = Release::freed;
};

inline std::unique_ptr<Upstream> fake(FakeUpstream::Counters* c, int fail_at = -1,
                                      size_t capacity = FakeUpstream::kDefaultCapacity) {
  return std::make_unique<FakeUpstream>(c, fail_at, capacity);
}

}  // namespace minfer::test
