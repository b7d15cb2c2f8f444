// The KV cache's block bookkeeping (engine/block_pool.h): allocation, sharing by reference,
// caching by tokens, least-recently-used eviction, and lookups by prefix.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "engine/block_pool.h"

namespace minfer::test {
namespace {

TEST(BlockPool, AllocatesEveryBlockOnceThenRefuses) {
  BlockPool pool(3, 4);
  std::vector<int32_t> got = {pool.allocate(), pool.allocate(), pool.allocate()};
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.allocate(), -1);
  EXPECT_EQ(pool.used_blocks(), 3);
  EXPECT_EQ(pool.available_blocks(), 0);
  pool.release(1);  // not remembered: free again
  EXPECT_EQ(pool.cached_blocks(), 0);
  EXPECT_EQ(pool.allocate(), 1);
}

TEST(BlockPool, ASharedBlockIsFreedByItsLastHolder) {
  BlockPool pool(2, 4);
  const int32_t b = pool.allocate();
  pool.hold(b);
  EXPECT_EQ(pool.refs(b), 2);
  pool.release(b);
  EXPECT_EQ(pool.used_blocks(), 1);
  pool.release(b);
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_THROW(pool.release(b), Error);  // held by nobody
  EXPECT_THROW(pool.hold(b), Error);     // free: nothing to share
}

TEST(BlockPool, FindsTheLongestRememberedChildOfAPrefix) {
  BlockPool pool(4, 4);
  const std::vector<int32_t> first = {1, 5, 6, 7}, second = {1, 5, 9};
  const int32_t a = pool.allocate(), b = pool.allocate();
  pool.remember(a, BlockPool::root(0), first.data(), 4);
  pool.remember(b, BlockPool::root(0), second.data(), 3);
  const std::vector<int32_t> query = {1, 5, 6, 8};
  BlockPool::Match m = pool.longest_child(BlockPool::root(0), query.data(), 4);
  EXPECT_EQ(m.block, a);
  EXPECT_EQ(m.n_equal, 3);
  m = pool.longest_child(BlockPool::root(0), second.data(), 3);
  EXPECT_EQ(m.block, b);
  EXPECT_EQ(m.n_equal, 3);
  // The same tokens after another prefix are another block.
  const uint64_t parent = BlockPool::key(BlockPool::root(0), first.data(), 4);
  EXPECT_EQ(pool.longest_child(parent, first.data(), 4).block, -1);
  const int32_t c = pool.allocate();
  pool.remember(c, parent, first.data(), 4);
  EXPECT_EQ(pool.longest_child(parent, first.data(), 4).block, c);
  EXPECT_NE(parent, BlockPool::key(BlockPool::root(0), second.data(), 3));
  // What a remembered block already holds is not remembered twice: that block is freed when released.
  const int32_t d = pool.allocate();
  pool.remember(d, BlockPool::root(0), first.data(), 2);
  EXPECT_FALSE(pool.remembered(d));
  pool.release(d);
  EXPECT_EQ(pool.cached_blocks(), 0);
}

TEST(BlockPool, EvictsTheLeastRecentlyReleasedCachedBlockFirst) {
  BlockPool pool(3, 2);
  const std::vector<int32_t> t0 = {1, 2}, t1 = {3, 4}, t2 = {5, 6};
  const int32_t b0 = pool.allocate(), b1 = pool.allocate(), b2 = pool.allocate();
  pool.remember(b0, BlockPool::root(0), t0.data(), 2);
  pool.remember(b1, BlockPool::root(0), t1.data(), 2);
  pool.remember(b2, BlockPool::root(0), t2.data(), 2);
  pool.release(b1);
  pool.release(b0);
  pool.release(b2);
  EXPECT_EQ(pool.cached_blocks(), 3);
  EXPECT_EQ(pool.available_blocks(), 3);
  pool.hold(b1);     // taken back: off the list
  pool.release(b1);  // now the most recent
  EXPECT_EQ(pool.allocate(), b0);  // the oldest released goes first, and is forgotten
  EXPECT_EQ(pool.longest_child(BlockPool::root(0), t0.data(), 2).block, -1);
  EXPECT_EQ(pool.allocate(), b2);
  EXPECT_EQ(pool.allocate(), b1);
  EXPECT_EQ(pool.allocate(), -1);
  EXPECT_EQ(pool.cached_blocks(), 0);
}

// Scopes (ServeRequest::cache_scope): the same tokens remembered in one scope are not found, in
// full or in part, from another's root.
TEST(BlockPool, ABlockIsFoundOnlyFromTheRootOfItsScope) {
  EXPECT_NE(BlockPool::root(0), BlockPool::root(1));
  EXPECT_NE(BlockPool::root(1), BlockPool::root(2));
  BlockPool pool(2, 4);
  const std::vector<int32_t> tokens = {1, 5, 6, 7};
  const int32_t a = pool.allocate();
  pool.remember(a, BlockPool::root(1), tokens.data(), 4);
  EXPECT_EQ(pool.longest_child(BlockPool::root(1), tokens.data(), 4).block, a);
  EXPECT_EQ(pool.longest_child(BlockPool::root(1), tokens.data(), 2).n_equal, 2);  // a partial match to copy
  for (uint64_t other : {0ull, 2ull}) {
    EXPECT_EQ(pool.longest_child(BlockPool::root(other), tokens.data(), 4).block, -1) << "scope " << other;
    EXPECT_EQ(pool.longest_child(BlockPool::root(other), tokens.data(), 2).n_equal, 0) << "scope " << other;
  }
  // The same tokens in another scope are remembered again, not taken for the first scope's block.
  const int32_t b = pool.allocate();
  pool.remember(b, BlockPool::root(2), tokens.data(), 4);
  EXPECT_TRUE(pool.remembered(b));
  EXPECT_EQ(pool.longest_child(BlockPool::root(2), tokens.data(), 4).block, b);
}

}  // namespace
}  // namespace minfer::test
