#include "core/pool.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <vector>

#include "core/checked.h"
#include "core/error.h"

namespace minfer {

// One block of a segment; blocks of a segment form a doubly linked list in address order.
struct CachingPool::Block {
  char* ptr;
  size_t size;
  Block* prev;  // nullptr for the first block of a segment
  Block* next;  // nullptr for the last block of a segment
  bool in_use;
  size_t segment_size;  // the upstream size, kept on the first block only
};

bool CachingPool::BySize::operator()(const Block* a, const Block* b) const {
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}

void* HostUpstream::allocate(size_t bytes) {
  size_t free_bytes = 0, total_bytes = 0;
  if (memory_info(&free_bytes, &total_bytes) && bytes > total_bytes) return nullptr;
  if (bytes < kHugePage) return std::aligned_alloc(CachingPool::kAlignment, bytes);  // a multiple of 256
  // note: large blocks (weights, the KV cache, big activations) start on a 2 MiB boundary and
  // ask for transparent huge pages. A decode step sweeps tens of MB: on 4 KiB pages that is one
  // TLB miss, and a restart of the hardware prefetcher's stream, every 64 cache lines. (The
  // rounding, under 2 MiB per block, is not counted in the pool's statistics.)
  if (bytes > SIZE_MAX - kHugePage) return nullptr;
  const size_t rounded = (bytes + kHugePage - 1) & ~(kHugePage - 1);
  void* ptr = std::aligned_alloc(kHugePage, rounded);
#if defined(MADV_HUGEPAGE)
  if (ptr != nullptr) madvise(ptr, rounded, MADV_HUGEPAGE);  // advice only: failure changes nothing
#endif
  return ptr;
}

bool HostUpstream::memory_info(size_t* free_bytes, size_t* total_bytes) const {
  struct sysinfo info;
  if (sysinfo(&info) != 0) return false;
  *total_bytes = static_cast<size_t>(info.totalram) * info.mem_unit;
  *free_bytes = static_cast<size_t>(info.freeram + info.bufferram) * info.mem_unit;
  // MemAvailable also counts the page cache the kernel can drop: what a new allocation can get.
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemAvailable:") {
      *free_bytes = kib << 10;
      break;
    }
    meminfo.ignore(64, '\n');
  }
  return true;
}

void* refused_allocation(bool out_of_memory, const char* call, size_t bytes, const char* error_name,
                         const char* error_text) {
  if (out_of_memory) return nullptr;
  fail(call, " of ", bytes, " bytes failed: ", error_name, " (", error_text, "), not out of memory");
}

Release HostUpstream::deallocate(void* ptr, size_t) noexcept {
  std::free(ptr);
  return Release::freed;
}

PoolBlock::PoolBlock(PoolBlock&& other) noexcept
    : pool_(other.pool_), block_(other.block_), ptr_(other.ptr_), size_(other.size_) {
  other.pool_ = nullptr;
  other.block_ = nullptr;
  other.ptr_ = nullptr;
  other.size_ = 0;
}

PoolBlock& PoolBlock::operator=(PoolBlock&& other) noexcept {
  if (this != &other) {
    reset();
    std::swap(pool_, other.pool_);
    std::swap(block_, other.block_);
    std::swap(ptr_, other.ptr_);
    std::swap(size_, other.size_);
  }
  return *this;
}

PoolBlock::~PoolBlock() { reset(); }

void PoolBlock::reset() {
  if (pool_ != nullptr && block_ != nullptr)
    pool_->free_block(static_cast<CachingPool::Block*>(block_));
  pool_ = nullptr;
  block_ = nullptr;
  ptr_ = nullptr;
  size_ = 0;
}

CachingPool::CachingPool(std::unique_ptr<Upstream> upstream, size_t min_segment_bytes)
    : upstream_(std::move(upstream)),
      min_segment_(std::max(kAlignment, (min_segment_bytes + kAlignment - 1) & ~(kAlignment - 1))) {
  MINFER_CHECK(upstream_ != nullptr, "CachingPool needs an upstream");
}

CachingPool::~CachingPool() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
  // Segments that still hold live blocks are a caller bug (a block outlived its pool); they are
  // leaked rather than freed under a live pointer.
}

PoolBlock CachingPool::allocate(size_t bytes) {
  PoolBlock handle;
  if (bytes == 0) return handle;
  size_t rounded = checked_size(checked_round_up(bytes, kAlignment, "pool request"), "pool request");
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.requests;
  Block* block = take_from_cache(rounded);
  if (block != nullptr) {
    ++stats_.cache_hits;
  } else {
    block = new_segment(rounded);
    if (block == nullptr) {
      release_cached_locked();
      block = new_segment(rounded);
      if (block == nullptr) fail_out_of_memory(bytes);
    }
    // The new segment may be larger than the request: split it like a cached block.
    free_blocks_.insert(block);
    block = take_from_cache(rounded);
  }
  stats_.allocated_bytes += block->size;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  handle.pool_ = this;
  handle.block_ = block;
  handle.ptr_ = block->ptr;
  handle.size_ = block->size;
  return handle;
}

// Best fit: the smallest free block of at least `bytes`, split if the rest is worth keeping.
CachingPool::Block* CachingPool::take_from_cache(size_t bytes) {
  Block probe{nullptr, bytes, nullptr, nullptr, false, 0};
  auto it = free_blocks_.lower_bound(&probe);
  if (it == free_blocks_.end()) return nullptr;
  Block* block = *it;
  free_blocks_.erase(it);
  if (block->size - bytes >= kAlignment) {
    auto* rest = new Block{block->ptr + bytes, block->size - bytes, block, block->next, false, 0};
    if (block->next != nullptr) block->next->prev = rest;
    block->next = rest;
    block->size = bytes;
    free_blocks_.insert(rest);
  }
  block->in_use = true;
  return block;
}

CachingPool::Block* CachingPool::new_segment(size_t bytes) {
  size_t segment = std::max(bytes, min_segment_);
  void* ptr = nullptr;
  try {
    ptr = upstream_->allocate(segment);
  } catch (...) {  // not out of memory: the upstream's own error, passed on without a retry
    ++stats_.upstream_failures;
    throw;
  }
  if (ptr == nullptr) {
    ++stats_.upstream_failures;
    return nullptr;
  }
  if (reinterpret_cast<uintptr_t>(ptr) % kAlignment != 0) {
    (void)upstream_->deallocate(ptr, segment);
    fail("upstream '", upstream_->name(), "' returned memory not aligned to ", kAlignment, " bytes");
  }
  auto* block = new Block{static_cast<char*>(ptr), segment, nullptr, nullptr, false, segment};
  segments_.emplace(block->ptr, block);
  ++stats_.upstream_allocs;
  stats_.reserved_bytes += segment;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  return block;
}

void CachingPool::free_block(Block* block) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.allocated_bytes -= block->size;
  block->in_use = false;
  if (Block* next = block->next; next != nullptr && !next->in_use) {  // absorb the next block
    free_blocks_.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    delete next;
  }
  if (Block* prev = block->prev; prev != nullptr && !prev->in_use) {  // let the previous absorb it
    free_blocks_.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    delete block;
    block = prev;
  }
  free_blocks_.insert(block);
}

void CachingPool::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

void CachingPool::release_cached_locked() {
  for (auto it = segments_.begin(); it != segments_.end();) {
    Block* head = it->second;
    if (!head->in_use && head->next == nullptr) {  // the whole segment is one free block
      free_blocks_.erase(head);
      if (upstream_->deallocate(head->ptr, head->segment_size) == Release::failed)
        ++stats_.upstream_free_failures;
      else
        ++stats_.upstream_frees;
      stats_.reserved_bytes -= head->segment_size;
      delete head;
      it = segments_.erase(it);
    } else {
      ++it;
    }
  }
}

PoolStats CachingPool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingPool::fail_out_of_memory(size_t requested) const {
  std::string message = detail::concat(
      "out of memory in the ", upstream_->name(), " pool: requested ", requested, " bytes, ",
      stats_.allocated_bytes, " allocated, ", stats_.reserved_bytes, " reserved");
  size_t free_bytes = 0, total_bytes = 0;
  if (upstream_->memory_info(&free_bytes, &total_bytes))
    message += detail::concat(", ", free_bytes, " free of ", total_bytes, " in ", upstream_->name(),
                              " memory");
  throw Error(message);
}

void CachingPool::check_invariants() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t reserved = 0, allocated = 0, free_count = 0;
  for (const auto& [base, head] : segments_) {
    MINFER_CHECK(head->ptr == base && head->prev == nullptr, "segment head is not its first block");
    size_t covered = 0;
    char* expected = base;
    for (const Block* b = head; b != nullptr; b = b->next) {
      MINFER_CHECK(b->ptr == expected, "blocks do not tile their segment");
      MINFER_CHECK(b->size > 0 && b->size % kAlignment == 0, "block size not a multiple of 256");
      MINFER_CHECK(reinterpret_cast<uintptr_t>(b->ptr) % kAlignment == 0, "block misaligned");
      MINFER_CHECK(b->next == nullptr || b->next->prev == b, "broken block links");
      if (!b->in_use) {
        ++free_count;
        MINFER_CHECK(free_blocks_.count(const_cast<Block*>(b)) == 1, "free block not indexed");
        MINFER_CHECK(b->next == nullptr || b->next->in_use, "adjacent free blocks not merged");
      } else {
        allocated += b->size;
      }
      covered += b->size;
      expected += b->size;
    }
    MINFER_CHECK(covered == head->segment_size, "blocks cover ", covered, " of a ",
                 head->segment_size, "-byte segment");
    reserved += head->segment_size;
  }
  MINFER_CHECK(free_count == free_blocks_.size(), "free index holds ", free_blocks_.size(),
               " blocks, segments hold ", free_count);
  MINFER_CHECK(reserved == stats_.reserved_bytes, "reserved stat ", stats_.reserved_bytes,
               " != ", reserved);
  MINFER_CHECK(allocated == stats_.allocated_bytes, "allocated stat ", stats_.allocated_bytes,
               " != ", allocated);
}

}  // namespace minfer
