#include "engine/recordings.h"

#include "core/error.h"

namespace minfer {

void RecordingCache::run(const std::string& key, FunctionRef<void()> body) {
  auto it = entries_.find(key);
  if (it == entries_.end()) it = entries_.emplace(key, Entry{}).first;  // once per key, not per step
  Entry& e = it->second;
  if (e.recording != nullptr) {
    if (e.recorded_epoch == epoch_) {
      recorder_.launch(e.recording);
      return;
    }
    recorder_.destroy(e.recording);  // it would write into memory that has moved
    e.recording = nullptr;
    ++stale_;
  }
  if (e.plain_epoch != epoch_) {
    body();  // may grow buffers, and so move to a new epoch
    e.plain_epoch = epoch_;
    return;
  }
  const uint64_t before = epoch_;
  void* recording = recorder_.capture(body);
  if (epoch_ != before) {
    recorder_.destroy(recording);
    fail("internal: a buffer was reallocated while recording '", key, "'");
  }
  e.recording = recording;
  e.recorded_epoch = epoch_;
  ++captures_;
  recorder_.launch(recording);
}

void RecordingCache::grow(Tensor* buffer, int64_t numel, DType dtype, DeviceKind device, CachingPool& pool) {
  if (buffer->defined() && buffer->numel() >= numel) return;
  buffers_moved();  // first: if the allocation below throws, the old buffer is already gone
  *buffer = Tensor();
  *buffer = Tensor::empty({numel}, dtype, device, pool);
}

void RecordingCache::forget(const std::string& prefix) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->first.compare(0, prefix.size(), prefix) == 0) {
      if (it->second.recording != nullptr) recorder_.destroy(it->second.recording);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace minfer
