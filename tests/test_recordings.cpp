// The bookkeeping of recorded work (engine/recordings.h) with a fake recorder: a "recording"
// remembers the buffer the work wrote to when it was captured and writes there on every replay,
// as a CUDA Graph replays the addresses it captured. After a buffer moves, replaying an old
// recording would write into freed memory; the cache must never do that, not even when the move
// fails half way (a pool over tests/fake_upstream.h that runs out of memory).
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "engine/recordings.h"
#include "tests/fake_upstream.h"

namespace minfer {
namespace {

// The backend's scratch buffer, as the work sees it: a pointer that moves when it grows.
struct Scratch {
  std::vector<int> a = std::vector<int>(4, 0), b = std::vector<int>(8, 0);
  int* current = a.data();
};

class FakeRecorder final : public Recorder {
 public:
  explicit FakeRecorder(Scratch& s) : s_(s) {}
  void* capture(FunctionRef<void()> body) override {
    capturing_ = true;
    body();  // a capture sees the work but does not run it
    capturing_ = false;
    ++live_;
    return new int*(s_.current);
  }
  void launch(void* r) override { ++**static_cast<int**>(r); }
  void destroy(void* r) noexcept override {
    --live_;
    delete static_cast<int**>(r);
  }
  bool capturing() const { return capturing_; }
  int live() const { return live_; }

 private:
  Scratch& s_;
  bool capturing_ = false;
  int live_ = 0;
};

TEST(Recordings, PlainRunThenCaptureThenReplay) {
  Scratch s;
  FakeRecorder recorder(s);
  RecordingCache cache(recorder);
  int plain_runs = 0;
  auto work = [&] {
    if (!recorder.capturing()) {
      ++*s.current;
      ++plain_runs;
    }
  };
  for (int step = 0; step < 5; ++step) cache.run("decode", work);
  EXPECT_EQ(plain_runs, 1) << "run once plainly, then captured and replayed";
  EXPECT_EQ(s.a[0], 5);
  EXPECT_EQ(cache.captures(), 1u);
  EXPECT_EQ(recorder.live(), 1);
}

TEST(Recordings, ABufferThatMovesInvalidatesEveryRecordingThatUsedIt) {
  Scratch s;
  FakeRecorder recorder(s);
  RecordingCache cache(recorder);
  auto work = [&] {
    if (!recorder.capturing()) ++*s.current;
  };
  cache.run("small", work);
  cache.run("small", work);  // captured: writes to a
  EXPECT_EQ(s.a[0], 2);
  // A larger request elsewhere grows the scratch buffer: it moves to b, a is freed.
  s.current = s.b.data();
  cache.buffers_moved();
  s.a[0] = -100;  // "freed": any write from here on would show
  cache.run("small", work);  // must not replay the recording that writes to a
  EXPECT_EQ(s.a[0], -100);
  EXPECT_EQ(s.b[0], 1) << "a plain run in the new epoch";
  EXPECT_EQ(cache.stale(), 1u);
  EXPECT_EQ(recorder.live(), 0) << "the stale recording is destroyed";
  cache.run("small", work);  // captured again, now with b
  cache.run("small", work);
  EXPECT_EQ(s.a[0], -100);
  EXPECT_EQ(s.b[0], 3);
  EXPECT_EQ(cache.captures(), 2u);
}

TEST(Recordings, GrowingDuringThePlainRunDefersTheCapture) {
  Scratch s;
  FakeRecorder recorder(s);
  RecordingCache cache(recorder);
  bool grew = false;
  auto work = [&] {
    if (!grew) {  // the first run grows the scratch buffer, as a first large request does
      s.current = s.b.data();
      cache.buffers_moved();
      grew = true;
    }
    if (!recorder.capturing()) ++*s.current;
  };
  cache.run("k", work);
  cache.run("k", work);
  cache.run("k", work);
  EXPECT_EQ(s.a[0], 0);
  EXPECT_EQ(s.b[0], 3);
  EXPECT_EQ(cache.captures(), 1u);
}

TEST(Recordings, AReallocationDuringACaptureIsAnError) {
  Scratch s;
  FakeRecorder recorder(s);
  RecordingCache cache(recorder);
  int runs = 0;
  auto work = [&] {
    if (recorder.capturing()) cache.buffers_moved();  // allocating while capturing
    ++runs;
  };
  cache.run("k", work);
  EXPECT_THROW(cache.run("k", work), Error);
  EXPECT_EQ(recorder.live(), 0) << "the half-made recording is destroyed";
}

// A recorder that only counts its launches.
class CountingRecorder final : public Recorder {
 public:
  void* capture(FunctionRef<void()> body) override {
    body();
    return new int(0);
  }
  void launch(void*) override { ++launches; }
  void destroy(void* r) noexcept override { delete static_cast<int*>(r); }
  int launches = 0;
};

// A scratch buffer grows through the cache (RecordingCache::grow, as the CUDA backend's do): the
// old buffer is freed before the larger one is allocated. When that allocation fails, the
// recording made with the old buffer must never be replayed: it would write into freed memory.
TEST(Recordings, AGrowthThatFailsLeavesNoRecordingToReplay) {
  test::FakeUpstream::Counters c;
  CachingPool pool(test::fake(&c, -1, 64 << 10), 256);  // 64 KiB of "device" memory
  Tensor scratch;
  CountingRecorder recorder;
  RecordingCache cache(recorder);
  auto step = [&] { cache.grow(&scratch, 1024, DType::f32, DeviceKind::cpu, pool); };
  cache.run("step", step);  // plain: the buffer grows to 4 KiB
  cache.run("step", step);  // captured with it, and launched
  EXPECT_EQ(recorder.launches, 1);
  cache.grow(&scratch, 1024, DType::f32, DeviceKind::cpu, pool);  // room enough: nothing moves
  cache.run("step", step);
  EXPECT_EQ(recorder.launches, 2);
  EXPECT_THROW(cache.grow(&scratch, 32 << 10, DType::f32, DeviceKind::cpu, pool), Error);  // 128 KiB
  EXPECT_FALSE(scratch.defined()) << "the old buffer is freed";
  cache.run("step", step);
  EXPECT_EQ(recorder.launches, 2) << "the recording made with the freed buffer was replayed";
  EXPECT_EQ(cache.stale(), 1u);
  EXPECT_TRUE(scratch.defined()) << "the plain run in the new epoch grew it again";
}

TEST(Recordings, ForgetDropsByPrefix) {
  Scratch s;
  FakeRecorder recorder(s);
  RecordingCache cache(recorder);
  auto work = [] {};
  for (const char* key : {"decoder 0/decode@1", "decoder 1/decode@1"}) {
    cache.run(key, work);
    cache.run(key, work);
  }
  EXPECT_EQ(recorder.live(), 2);
  cache.forget("decoder 0/");
  EXPECT_EQ(recorder.live(), 1);
  cache.forget("");
  EXPECT_EQ(recorder.live(), 0);
}

}  // namespace
}  // namespace minfer
