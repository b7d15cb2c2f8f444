// The KV cache's blocks as the scheduler hands them out: which are free, which sequences hold
// which, and which finished blocks can be found again by their tokens (automatic prefix caching, as
// vLLM's). Host bookkeeping only; the keys and values live in the KvCache (engine/kv_cache.h).
//
// A block is in one of three states:
//   - free: on the free list, holding nothing anyone wants;
//   - held: named by the tables of `refs` > 0 sequences (a shared prefix is held by several);
//   - cached: held by nobody, but remembered by its tokens, on a least-recently-used list. A
//     sequence that starts with those tokens takes it back; a sequence that needs a block and
//     finds the free list empty takes the oldest cached block and the pool forgets its tokens.
//
// What a block is remembered by: the key of every token before it (its parent's key; root(scope)
// for a sequence's first block) and its own tokens, block_size of them when it is full, fewer for
// the last block of a finished sequence. A full block's key, key(parent, its tokens), is its
// children's parent. A lookup (longest_child) compares a candidate's parent key and its own
// tokens; that the tokens before it are the same rests on the 64-bit key of the whole prefix (two
// different prefixes with one key: about 2^-64 for a pair). A child whose parent was evicted is
// found again once a sequence with the same prefix remembers a new parent, since keys follow
// tokens, not blocks.
//
// Scopes: every key chain starts at root(scope), and root is one-to-one, so a first block is
// found, shared or copied only by a sequence of its own scope, and a later block only by a 64-bit
// collision of two chains (which whoever picks the scopes makes unpredictable: serve draws them
// from a keyed hash, serve/serve_api.h). Scope 0 is the one every request shares by default.
//
// note: everything is sized when the pool is made (a bucket array of twice the blocks, rounded to a
// power of two, and per-block arrays and lists threaded through them), so no call allocates: the
// scheduler runs these inside a step, and a step allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace minfer {

class BlockPool {
 public:
  BlockPool(int64_t n_blocks, int64_t block_size);

  int64_t n_blocks() const { return n_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t used_blocks() const { return n_used_; }      // held by at least one sequence
  int64_t cached_blocks() const { return n_cached_; }  // held by none, remembered by their tokens
  int64_t available_blocks() const { return n_blocks_ - n_used_; }  // free or cached

  // A block for a sequence to write into, held once: a free one, else the least recently used
  // cached one, which is forgotten. -1 when every block is held.
  int32_t allocate();
  // One more sequence holds `block` (a cached block leaves the LRU list).
  void hold(int32_t block);
  // One sequence fewer holds `block`; when none is left it is cached if remembered, else free.
  void release(int32_t block);
  int32_t refs(int32_t block) const { return refs_[size_t(block)]; }

  // Remembers that `block`, held, holds tokens[0..n) (1 <= n <= block_size) after the prefix whose
  // key is `parent`. A full block that an equal one (same parent, same tokens) already stands for
  // is not remembered twice: it is freed when released. A block is remembered once.
  void remember(int32_t block, uint64_t parent, const int32_t* tokens, int64_t n);
  bool remembered(int32_t block) const { return n_tokens_[size_t(block)] > 0; }

  // The remembered block after `parent` whose tokens begin with the most of tokens[0..n), and how
  // many of them: { -1, 0 } when none shares the first token. A full match (n_equal ==
  // block_size) can be held as it is; a shorter one is a partly filled block, to be copied.
  struct Match {
    int32_t block = -1;
    int64_t n_equal = 0;
  };
  Match longest_child(uint64_t parent, const int32_t* tokens, int64_t n) const;

  // The key of the prefix `parent` followed by tokens[0..n).
  static uint64_t key(uint64_t parent, const int32_t* tokens, int64_t n);
  // The parent key of a first block in `scope` (ServeRequest::cache_scope): two scopes never
  // share one.
  static uint64_t root(uint64_t scope);

 private:
  void forget(int32_t block);
  void lru_push(int32_t block);
  void lru_remove(int32_t block);
  size_t bucket(uint64_t parent) const { return size_t(parent & mask_); }

  int64_t n_blocks_, block_size_;
  int64_t n_used_ = 0, n_cached_ = 0;
  std::vector<int32_t> free_;     // a stack of free blocks
  std::vector<int32_t> refs_;     // per block: the sequences holding it
  std::vector<int32_t> n_tokens_;  // per block: tokens remembered (0: not remembered)
  std::vector<uint64_t> parent_;   // per block: its parent's key, when remembered
  std::vector<int32_t> tokens_;    // (n_blocks, block_size): the tokens remembered
  // Remembered blocks by parent key: bucket heads and a singly linked chain through the blocks.
  std::vector<int32_t> heads_, next_in_bucket_;
  uint64_t mask_ = 0;
  // Cached blocks, least recently released first: a doubly linked list through the blocks.
  std::vector<int32_t> lru_prev_, lru_next_;
  int32_t lru_head_ = -1, lru_tail_ = -1;
};

}  // namespace minfer
