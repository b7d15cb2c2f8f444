#include "engine/block_pool.h"

#include <algorithm>

#include "core/error.h"
#include "core/splitmix.h"

namespace minfer {

BlockPool::BlockPool(int64_t n_blocks, int64_t block_size) : n_blocks_(n_blocks), block_size_(block_size) {
  MINFER_CHECK(n_blocks > 0 && n_blocks <= INT32_MAX && block_size > 0, "block pool: ", n_blocks, " blocks of ",
               block_size, " positions");
  const size_t n = size_t(n_blocks);
  free_.resize(n);
  for (size_t i = 0; i < n; ++i) free_[i] = int32_t(n - 1 - i);  // block 0 is handed out first
  refs_.assign(n, 0);
  n_tokens_.assign(n, 0);
  parent_.assign(n, 0);
  tokens_.assign(n * size_t(block_size), 0);
  uint64_t buckets = 1;
  while (buckets < 2 * uint64_t(n_blocks)) buckets *= 2;
  heads_.assign(size_t(buckets), -1);
  mask_ = buckets - 1;
  next_in_bucket_.assign(n, -1);
  lru_prev_.assign(n, -1);
  lru_next_.assign(n, -1);
}

uint64_t BlockPool::root(uint64_t scope) {
  // The finalizer is a bijection of 64-bit words (xor-shifts and odd multipliers are invertible), so
  // distinct scopes give distinct roots.
  return splitmix64_finalize(scope ^ 0x6d696e6665722d31ull);
}

uint64_t BlockPool::key(uint64_t parent, const int32_t* tokens, int64_t n) {
  uint64_t h = splitmix64_finalize(parent);
  for (int64_t i = 0; i < n; ++i)
    h = splitmix64_finalize(h ^ (uint64_t(uint32_t(tokens[i])) + 0x9e3779b97f4a7c15ull));
  return h;
}

int32_t BlockPool::allocate() {
  int32_t block = -1;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (lru_head_ >= 0) {
    block = lru_head_;
    lru_remove(block);
    --n_cached_;
    forget(block);
  } else {
    return -1;
  }
  refs_[size_t(block)] = 1;
  ++n_used_;
  return block;
}

void BlockPool::hold(int32_t block) {
  MINFER_CHECK(block >= 0 && block < n_blocks_, "block pool: no block ", block);
  int32_t& refs = refs_[size_t(block)];
  if (refs == 0) {
    MINFER_CHECK(remembered(block), "block pool: block ", block, " is free");
    lru_remove(block);
    --n_cached_;
    ++n_used_;
  }
  ++refs;
}

void BlockPool::release(int32_t block) {
  MINFER_CHECK(block >= 0 && block < n_blocks_ && refs_[size_t(block)] > 0, "block pool: block ", block,
               " is not held");
  if (--refs_[size_t(block)] > 0) return;
  --n_used_;
  if (remembered(block)) {
    lru_push(block);
    ++n_cached_;
  } else {
    free_.push_back(block);
  }
}

void BlockPool::remember(int32_t block, uint64_t parent, const int32_t* tokens, int64_t n) {
  MINFER_CHECK(block >= 0 && block < n_blocks_ && refs_[size_t(block)] > 0 && !remembered(block),
               "block pool: block ", block, " is not held, or is remembered already");
  MINFER_CHECK(n >= 1 && n <= block_size_, "block pool: ", n, " tokens for a block of ", block_size_);
  if (longest_child(parent, tokens, n).n_equal == n) return;  // an equal or longer block stands for it
  n_tokens_[size_t(block)] = int32_t(n);
  parent_[size_t(block)] = parent;
  std::copy(tokens, tokens + n, tokens_.begin() + block * block_size_);
  const size_t b = bucket(parent);
  next_in_bucket_[size_t(block)] = heads_[b];
  heads_[b] = block;
}

BlockPool::Match BlockPool::longest_child(uint64_t parent, const int32_t* tokens, int64_t n) const {
  Match best;
  for (int32_t b = heads_[bucket(parent)]; b >= 0; b = next_in_bucket_[size_t(b)]) {
    if (parent_[size_t(b)] != parent) continue;
    const int32_t* held = tokens_.data() + b * block_size_;
    const int64_t limit = std::min<int64_t>(n, n_tokens_[size_t(b)]);
    int64_t equal = 0;
    while (equal < limit && held[equal] == tokens[equal]) ++equal;
    if (equal > best.n_equal) best = {b, equal};
  }
  return best;
}

// Unlinks a remembered block from its bucket; its tokens are no longer found.
void BlockPool::forget(int32_t block) {
  if (!remembered(block)) return;
  int32_t* link = &heads_[bucket(parent_[size_t(block)])];
  while (*link != block) link = &next_in_bucket_[size_t(*link)];
  *link = next_in_bucket_[size_t(block)];
  next_in_bucket_[size_t(block)] = -1;
  n_tokens_[size_t(block)] = 0;
}

void BlockPool::lru_push(int32_t block) {
  lru_prev_[size_t(block)] = lru_tail_;
  lru_next_[size_t(block)] = -1;
  if (lru_tail_ >= 0) lru_next_[size_t(lru_tail_)] = block;
  else lru_head_ = block;
  lru_tail_ = block;
}

void BlockPool::lru_remove(int32_t block) {
  const int32_t prev = lru_prev_[size_t(block)], next = lru_next_[size_t(block)];
  if (prev >= 0) lru_next_[size_t(prev)] = next;
  else lru_head_ = next;
  if (next >= 0) lru_prev_[size_t(next)] = prev;
  else lru_tail_ = prev;
  lru_prev_[size_t(block)] = lru_next_[size_t(block)] = -1;
}

}  // namespace minfer
