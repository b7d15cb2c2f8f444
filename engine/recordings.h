// The bookkeeping of recorded work (CUDA Graphs), kept apart from CUDA so that it is tested
// without a GPU (tests/test_recordings.cpp).
//
// A recording replays exactly the kernels and addresses it captured. The model's graph epoch (in
// the key) covers its own buffers; the backend's buffers are covered here by a buffer epoch: a
// backend's scratch buffers, which recorded work may use, grow through grow(), which bumps it
// (buffers_moved()) before the old buffer is freed, so that even an allocation that throws leaves
// no recording that would replay into freed memory. A recording made in an older epoch is never
// replayed: it is destroyed, and the work runs plainly once in the new epoch (buffers grow
// outside of any capture, where allocating is allowed) before it is captured again.
//
// A recording replays the device work it captured, never the host's decisions: host work (checking
// a step's rows) and work done only sometimes (copying a block table that changed) stay outside
// the recorded body and run at every step (Decoder::run_rows).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/tensor.h"
#include "core/threads.h"

namespace minfer {

// What a device does with recorded work.
class Recorder {
 public:
  virtual ~Recorder() = default;
  // Records the work `body` enqueues without running it; returns a handle to replay it.
  virtual void* capture(FunctionRef<void()> body) = 0;
  virtual void launch(void* recording) = 0;
  virtual void destroy(void* recording) noexcept = 0;
};

class RecordingCache {
 public:
  explicit RecordingCache(Recorder& recorder) : recorder_(recorder) {}
  ~RecordingCache() { forget(""); }
  RecordingCache(const RecordingCache&) = delete;
  RecordingCache& operator=(const RecordingCache&) = delete;

  // Runs the work `body` enqueues under `key` (the same work on the same memory every time):
  // plainly the first time in a buffer epoch, captured the second time, replayed from then on.
  void run(const std::string& key, FunctionRef<void()> body);
  // A buffer that recorded work may use was reallocated: no recording made so far is replayed.
  void buffers_moved() { ++epoch_; }
  // Makes `buffer`, which recorded work may use, hold at least `numel` elements of `dtype` (from
  // `pool`, on `device`). Growing invalidates every recording first, then frees the old buffer
  // (back to the pool before the larger request), then allocates.
  void grow(Tensor* buffer, int64_t numel, DType dtype, DeviceKind device, CachingPool& pool);
  // Destroys the recordings whose key starts with `prefix` ("" for all).
  void forget(const std::string& prefix);

  uint64_t captures() const { return captures_; }  // recordings made, over the cache's life
  uint64_t stale() const { return stale_; }        // recordings destroyed because buffers moved

 private:
  struct Entry {
    void* recording = nullptr;
    uint64_t recorded_epoch = 0;
    uint64_t plain_epoch = ~uint64_t(0);  // the epoch of the last plain run
  };
  Recorder& recorder_;
  std::map<std::string, Entry> entries_;
  uint64_t epoch_ = 0;
  uint64_t captures_ = 0, stale_ = 0;
};

}  // namespace minfer
