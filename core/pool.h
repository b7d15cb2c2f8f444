// A caching memory pool, the same logic for host, pinned-host and device memory.
//
// Asking the driver for memory (cudaMalloc, cudaMallocHost) is slow and synchronising, so a pool
// keeps what it got: freed blocks stay cached and the next request of a fitting size reuses one.
//   - Requests are rounded up to 256 bytes; every block starts 256-byte aligned (the upstream
//     must return 256-aligned segments: cudaMalloc does, HostUpstream does).
//   - Best fit: the smallest cached block that is large enough is taken (ordered by size, then
//     address), and split when the rest is at least 256 bytes; the rest stays cached.
//   - A request that no cached block fits gets a new segment from the upstream of
//     max(request, min_segment) bytes, so many small requests share one upstream allocation.
//   - Freed neighbours inside a segment are merged, so a segment that is entirely free again is one
//     block, and release_cached() hands such segments back to the upstream.
//   - When the upstream is out of memory, the pool releases its cache and retries once; if that
//     fails too the error states the request and the pool's allocated and reserved bytes (and,
//     where the upstream can tell, the free and total bytes of the device). An upstream that fails
//     otherwise throws its own error, which the pool passes on unchanged.
// Memory is only handed out through PoolBlock, a move-only RAII handle: a block goes back to the
// pool when its handle dies. The pool must outlive its blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

namespace minfer {

// What became of a segment handed back to its upstream.
enum class Release {
  freed,
  shutting_down,  // the driver is unloading (at process exit) and takes the memory with it
  failed,         // the upstream refused; the segment is forgotten (counted in PoolStats)
};

// Where a pool's segments come from.
class Upstream {
 public:
  virtual ~Upstream() = default;
  // Returns a 256-byte aligned region of `bytes` bytes, or nullptr when the memory is exhausted
  // (the pool then releases its cache and retries once). Any other failure, such as a device left
  // in an error state by an earlier fault, throws Error naming it (refused_allocation): no retry
  // helps, and "out of memory" would send the reader the wrong way.
  virtual void* allocate(size_t bytes) = 0;
  // Gives a segment back. Never throws: it runs in destructors, and a pool that lives in a static
  // object is destroyed after main() returns, when the CUDA runtime may already be unloading.
  virtual Release deallocate(void* ptr, size_t bytes) noexcept = 0;
  virtual std::string name() const = 0;
  // Free and total bytes of the memory behind this upstream, where it can tell (CUDA can).
  virtual bool memory_info(size_t* free_bytes, size_t* total_bytes) const {
    (void)free_bytes;
    (void)total_bytes;
    return false;
  }
};

// What an upstream returns when the driver refused `bytes` with the error `error_name`
// (`error_text` its description): nullptr when `out_of_memory`; any other error throws Error
// ("cudaMalloc of 1048576 bytes failed: cudaErrorIllegalAddress (...), not out of memory"). The
// CUDA upstreams classify cudaMalloc's and cudaMallocHost's status with it.
void* refused_allocation(bool out_of_memory, const char* call, size_t bytes, const char* error_name,
                         const char* error_text);

// Ordinary host memory (aligned_alloc). A request larger than the machine's physical memory is
// refused without asking the allocator, so an absurd size fails cleanly instead of exhausting
// swap or tripping a sanitizer's allocation limit.
class HostUpstream final : public Upstream {
 public:
  static constexpr size_t kHugePage = size_t(2) << 20;
  void* allocate(size_t bytes) override;
  Release deallocate(void* ptr, size_t bytes) noexcept override;
  std::string name() const override { return "host"; }
  bool memory_info(size_t* free_bytes, size_t* total_bytes) const override;
};

struct PoolStats {
  size_t allocated_bytes = 0;       // held by live PoolBlocks (rounded sizes)
  size_t peak_allocated_bytes = 0;
  size_t reserved_bytes = 0;        // obtained from the upstream and not yet given back
  size_t peak_reserved_bytes = 0;
  uint64_t requests = 0;            // allocate() calls with a non-zero size
  uint64_t cache_hits = 0;          // requests served from cached memory
  uint64_t upstream_allocs = 0;     // successful upstream allocations
  uint64_t upstream_frees = 0;        // segments given back (freed, or taken by a driver shutting down)
  uint64_t upstream_failures = 0;     // failed upstream allocations
  uint64_t upstream_free_failures = 0;  // segments the upstream refused to take back
};

class CachingPool;

// Move-only owner of one block of a CachingPool.
class PoolBlock {
 public:
  PoolBlock() = default;
  PoolBlock(PoolBlock&& other) noexcept;
  PoolBlock& operator=(PoolBlock&& other) noexcept;
  PoolBlock(const PoolBlock&) = delete;
  PoolBlock& operator=(const PoolBlock&) = delete;
  ~PoolBlock();

  void* data() const { return ptr_; }
  size_t size() const { return size_; }  // the rounded size actually reserved for this block
  explicit operator bool() const { return ptr_ != nullptr; }
  void reset();  // gives the block back now

 private:
  friend class CachingPool;
  CachingPool* pool_ = nullptr;
  void* block_ = nullptr;  // CachingPool::Block*
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

class CachingPool {
 public:
  static constexpr size_t kAlignment = 256;
  static constexpr size_t kDefaultMinSegment = size_t(2) << 20;

  explicit CachingPool(std::unique_ptr<Upstream> upstream,
                       size_t min_segment_bytes = kDefaultMinSegment);
  ~CachingPool();
  CachingPool(const CachingPool&) = delete;
  CachingPool& operator=(const CachingPool&) = delete;

  // A block of at least `bytes` bytes (an empty handle for 0). Throws Error when out of memory.
  PoolBlock allocate(size_t bytes);
  // Gives every entirely free segment back to the upstream.
  void release_cached();
  PoolStats stats() const;
  const Upstream& upstream() const { return *upstream_; }
  // Walks every segment and throws Error describing the first broken invariant: blocks tile each
  // segment exactly, are aligned and rounded, free neighbours are merged, the free index and the
  // stats agree with the blocks. Tests call it after every step.
  void check_invariants() const;

 private:
  struct Block;
  struct BySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  friend class PoolBlock;
  void free_block(Block* block);
  Block* take_from_cache(size_t bytes);
  Block* new_segment(size_t bytes);
  void release_cached_locked();
  [[noreturn]] void fail_out_of_memory(size_t requested) const;

  std::unique_ptr<Upstream> upstream_;
  size_t min_segment_;
  mutable std::mutex mutex_;
  std::set<Block*, BySize> free_blocks_;
  std::map<char*, Block*> segments_;  // segment base -> its first block
  PoolStats stats_;
};

}  // namespace minfer
