// The caching pool's logic, on the CPU, with a fake upstream that records every segment and can
// be told to fail its k-th allocation (in the manner of llama.cpp's test-alloc), out of memory or
// with a device error (tests/fake_upstream.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/pool.h"
#include "tests/fake_upstream.h"

namespace minfer::test {
namespace {

TEST(Pool, RoundsAndAligns) {
  FakeUpstream::Counters c;
  CachingPool pool(fake(&c), 4096);
  for (size_t bytes : {1, 255, 256, 257, 1000, 4096, 5000}) {
    PoolBlock b = pool.allocate(bytes);
    EXPECT_EQ(b.size() % 256, 0u);
    EXPECT_GE(b.size(), bytes);
    EXPECT_LT(b.size() - bytes, 256u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 256, 0u);
    pool.check_invariants();
  }
  EXPECT_FALSE(pool.allocate(0));
}

TEST(Pool, ReusesFreedBlockWithoutUpstream) {
  FakeUpstream::Counters c;
  CachingPool pool(fake(&c), 256);
  void* first;
  {
    PoolBlock a = pool.allocate(10000);
    first = a.data();
  }
  EXPECT_EQ(c.allocs, 1);
  PoolBlock b = pool.allocate(10000);
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(c.allocs, 1);
  EXPECT_EQ(pool.stats().cache_hits, 1u);
}

TEST(Pool, BestFitPicksSmallestFittingBlock) {
  FakeUpstream::Counters c;
  CachingPool pool(fake(&c), 256);
  // Three separate segments of different sizes, then free them all.
  PoolBlock big = pool.allocate(8192), small = pool.allocate(1024), mid = pool.allocate(4096);
  void* small_ptr = small.data();
  void* mid_ptr = mid.data();
  big.reset();
  small.reset();
  mid.reset();
  EXPECT_EQ(pool.allocate(1000).data(), small_ptr);
  EXPECT_EQ(pool.allocate(3000).data(), mid_ptr);
  pool.check_invariants();
}

TEST(Pool, SplitsAndMergesWithinASegment) {
  FakeUpstream::Counters c;
  CachingPool pool(fake(&c), 1 << 16);
  PoolBlock a = pool.allocate(1000), b = pool.allocate(1000), d = pool.allocate(1000);
  EXPECT_EQ(c.allocs, 1);  // all three carved from one 64 KiB segment
  EXPECT_EQ(static_cast<char*>(b.data()) - static_cast<char*>(a.data()), 1024);
  pool.check_invariants();
  b.reset();
  a.reset();
  pool.check_invariants();  // a and b merged with each other
  d.reset();
  pool.check_invariants();  // and with d and the tail: the segment is one free block again
  pool.release_cached();
  EXPECT_EQ(pool.stats().reserved_bytes, 0u);
  EXPECT_EQ(c.frees, 1);
}

TEST(Pool, StatsTrackCurrentAndPeak) {
  FakeUpstream::Counters c;
  CachingPool pool(fake(&c), 256);
  {
    PoolBlock a = pool.allocate(1000);
    PoolBlock b = pool.allocate(3000);
    PoolStats s = pool.stats();
    EXPECT_EQ(s.allocated_bytes, 1024u + 3072u);
    EXPECT_EQ(s.reserved_bytes, 1024u + 3072u);
    EXPECT_EQ(s.upstream_allocs, 2u);
    EXPECT_EQ(s.requests, 2u);
  }
  PoolStats s = pool.stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.peak_allocated_bytes, 4096u);
  EXPECT_EQ(s.reserved_bytes, 4096u);  // still cached
  pool.release_cached();
  s = pool.stats();
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.peak_reserved_bytes, 4096u);
  EXPECT_EQ(s.upstream_frees, 2u);
}

// A pool destroyed after its driver began shutting down (a static pool at process exit, after
// the CUDA runtime unloaded) must neither throw nor abort: the driver takes the memory back.
TEST(Pool, DeallocationWhileTheDriverShutsDownNeverThrows) {
  FakeUpstream::Counters c;
  auto upstream = std::make_unique<FakeUpstream>(&c);
  FakeUpstream* raw = upstream.get();
  auto pool = std::make_unique<CachingPool>(std::move(upstream), 4096);
  PoolBlock a = pool->allocate(1000), b = pool->allocate(100000);
  a.reset();
  raw->report(Release::shutting_down);
  EXPECT_NO_THROW(pool->release_cached());  // a's segment goes back, "shutting down"
  EXPECT_EQ(pool->stats().upstream_frees, 1u);
  EXPECT_EQ(pool->stats().upstream_free_failures, 0u);
  b.reset();
  EXPECT_NO_THROW(pool.reset());  // the destructor hands back the rest the same way
  EXPECT_EQ(c.frees, 2);
}

// An upstream that refuses a segment is counted, not thrown: deallocation runs in destructors.
TEST(Pool, RefusedDeallocationIsCountedNotThrown) {
  FakeUpstream::Counters c;
  auto upstream = std::make_unique<FakeUpstream>(&c);
  FakeUpstream* raw = upstream.get();
  CachingPool pool(std::move(upstream), 4096);
  pool.allocate(5000).reset();
  pool.allocate(500000).reset();
  raw->report(Release::failed);
  EXPECT_NO_THROW(pool.release_cached());
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.upstream_free_failures, 2u);
  EXPECT_EQ(s.upstream_frees, 0u);
  EXPECT_EQ(s.reserved_bytes, 0u) << "a refused segment is forgotten, not kept";
  pool.check_invariants();
}

TEST(Pool, HandleIsMoveOnly) {
  static_assert(!std::is_copy_constructible_v<PoolBlock>);
  static_assert(!std::is_copy_assignable_v<PoolBlock>);
  FakeUpstream::Counters c;
  CachingPool pool(fake(&c), 256);
  PoolBlock a = pool.allocate(512);
  void* p = a.data();
  PoolBlock b = std::move(a);
  EXPECT_FALSE(a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(pool.stats().allocated_bytes, 512u);
  b = PoolBlock();
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
}

TEST(Pool, FailureReleasesCacheAndRetriesOnce) {
  FakeUpstream::Counters c;
  // Room for 8 KiB: a cached 4 KiB block must be released before a new 6 KiB segment fits.
  CachingPool pool(fake(&c, -1, 8192), 256);
  { PoolBlock a = pool.allocate(4096); }
  PoolBlock keep = pool.allocate(1024);  // carved from the cached 4 KiB segment
  keep.reset();
  PoolBlock big = pool.allocate(6144);
  EXPECT_TRUE(big);
  EXPECT_EQ(c.failures, 1);
  EXPECT_EQ(pool.stats().upstream_frees, 1u);
  pool.check_invariants();
}

TEST(Pool, KthUpstreamFailureIsReportedWithNumbers) {
  for (int k = 1; k <= 4; ++k) {
    FakeUpstream::Counters c;
    // Fails the k-th attempt; the pool's one retry is attempt k+1, which succeeds.
    CachingPool pool(fake(&c, k), 256);
    std::vector<PoolBlock> blocks;
    for (int i = 0; i < 6; ++i) blocks.push_back(pool.allocate(1024 * (i + 1)));
    EXPECT_EQ(c.failures, 1) << "k=" << k;
    pool.check_invariants();
  }
  FakeUpstream::Counters c;
  CachingPool pool(fake(&c, -1, 4096), 256);
  PoolBlock a = pool.allocate(2048);
  try {
    PoolBlock b = pool.allocate(3000);
    FAIL() << "expected out of memory";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("requested 3000 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("2048 allocated"), std::string::npos) << m;
    EXPECT_NE(m.find("2048 reserved"), std::string::npos) << m;
    EXPECT_NE(m.find("2048 free of 4096 in fake memory"), std::string::npos) << m;
  }
  EXPECT_EQ(c.failures, 2);  // the first attempt and the one retry
  pool.check_invariants();
}

// The CUDA upstreams' rule (core/device_cuda.cu): cudaErrorMemoryAllocation is out of memory, and
// the pool may free its cache and retry; any other status (a sticky error after a kernel's fault)
// is reported by its name and text, never as out of memory.
TEST(Pool, OnlyOutOfMemoryIsReportedAsOutOfMemory) {
  EXPECT_EQ(refused_allocation(true, "cudaMalloc", 4096, "cudaErrorMemoryAllocation", "out of memory"), nullptr);
  try {
    refused_allocation(false, "cudaMalloc", 4096, "cudaErrorIllegalAddress", "an illegal memory access was encountered");
    FAIL() << "expected the device error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "cudaMalloc of 4096 bytes failed: cudaErrorIllegalAddress (an illegal memory access was "
                           "encountered), not out of memory");
  }
}

// A device error from the upstream reaches the caller as it is: no retry (it cannot help), no
// "out of memory", the failure counted and the pool intact for the next request.
TEST(Pool, AnUpstreamDeviceErrorIsPassedOnWithoutARetry) {
  FakeUpstream::Counters c;
  auto upstream = std::make_unique<FakeUpstream>(&c);
  upstream->device_error_at(3);
  CachingPool pool(std::move(upstream), 256);
  PoolBlock a = pool.allocate(1000);
  { PoolBlock cached = pool.allocate(512); }  // a cached block the retry would have released
  try {
    PoolBlock b = pool.allocate(100000);
    FAIL() << "expected the device error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("fakeMalloc of 100096 bytes failed: fakeErrorIllegalAddress"), std::string::npos) << m;
    EXPECT_EQ(m.find("out of memory in the"), std::string::npos) << m;
  }
  EXPECT_EQ(c.failures, 1) << "no retry after a device error";
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.upstream_failures, 1u);
  EXPECT_EQ(s.upstream_frees, 0u) << "the cache was not released for a retry";
  pool.check_invariants();
  EXPECT_TRUE(pool.allocate(100000)) << "the third attempt is served";
}

TEST(Pool, AbsurdRequestIsRefused) {
  FakeUpstream::Counters c;
  CachingPool pool(fake(&c), 256);
  EXPECT_THROW(pool.allocate(SIZE_MAX - 10), Error);
  EXPECT_THROW(pool.allocate(size_t(1) << 62), Error);  // more than the fake's capacity
  pool.check_invariants();
}

TEST(Pool, HostUpstreamRefusesMoreThanPhysicalMemory) {
  CachingPool pool(std::make_unique<HostUpstream>());
  try {
    pool.allocate(size_t(1) << 60);
    FAIL() << "expected out of memory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in host memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.stats().reserved_bytes, 0u);
}

// 10^6 random operations over several seeds; after every step the pool's own invariants hold,
// no two live blocks overlap, every block is aligned and sized, and the stats match.
TEST(Pool, RandomOperationsKeepInvariants) {
  const int kSeeds = 4;
  const int kStepsPerSeed = 250000;
  for (int seed = 1; seed <= kSeeds; ++seed) {
    FakeUpstream::Counters c;
    {
      CachingPool pool(fake(&c), 1 << 14);
      std::mt19937 rng(seed);
      std::map<uintptr_t, PoolBlock> live;  // by address: neighbours are checked for overlap
      size_t live_bytes = 0;
      for (int step = 0; step < kStepsPerSeed; ++step) {
        bool allocate = live.empty() || (live.size() < 48 && rng() % 2 == 0);
        if (allocate) {
          size_t bytes = 1 + rng() % (rng() % 8 == 0 ? 65536 : 2048);
          PoolBlock b = pool.allocate(bytes);
          ASSERT_GE(b.size(), bytes);
          ASSERT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 256, 0u);
          auto addr = reinterpret_cast<uintptr_t>(b.data());
          auto next = live.lower_bound(addr);
          if (next != live.end()) {
            ASSERT_LE(addr + b.size(), next->first) << "overlap";
          }
          if (next != live.begin()) {
            auto prev = std::prev(next);
            ASSERT_LE(prev->first + prev->second.size(), addr) << "overlap";
          }
          static_cast<char*>(b.data())[0] = 1;  // ASan checks the memory is real
          static_cast<char*>(b.data())[b.size() - 1] = 1;
          live_bytes += b.size();
          live.emplace(addr, std::move(b));
        } else {
          auto it = live.begin();
          std::advance(it, rng() % live.size());
          live_bytes -= it->second.size();
          live.erase(it);
        }
        if (step % 9973 == 0) pool.release_cached();
        ASSERT_EQ(pool.stats().allocated_bytes, live_bytes);
        ASSERT_NO_THROW(pool.check_invariants()) << "seed " << seed << " step " << step;
      }
      live.clear();
      pool.release_cached();
      EXPECT_EQ(pool.stats().reserved_bytes, 0u);
      EXPECT_EQ(pool.stats().allocated_bytes, 0u);
      EXPECT_GT(pool.stats().cache_hits, 0u);
    }
    EXPECT_EQ(c.live_bytes, 0u);
    EXPECT_EQ(c.allocs, c.frees);
  }
}

}  // namespace
}  // namespace minfer::test
