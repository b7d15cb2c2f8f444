// The thread pool runs every task exactly once, across generations, with any spin policy.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "core/threads.h"

namespace minfer {
namespace {

class ThreadPoolTest : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(ThreadPoolTest, EveryTaskRunsExactlyOnce) {
  auto [threads, spin] = GetParam();
  ThreadPool pool(threads, spin);
  EXPECT_EQ(pool.size(), threads);
  std::vector<std::atomic<int>> hits(1000);
  for (int round = 0; round < 2000; ++round) {
    int n = 1 + (round * 37) % 1000;
    for (int i = 0; i < n; ++i) hits[i].store(0);
    pool.run(n, [&](int task) { hits[task].fetch_add(1); });
    for (int i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "round " << round << " task " << i;
  }
}

TEST_P(ThreadPoolTest, ParallelForCoversTheRangeInGrains) {
  auto [threads, spin] = GetParam();
  ThreadPool pool(threads, spin);
  for (int64_t n : {1, 15, 16, 17, 1000, 4099}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(n, 16, [&](int64_t begin, int64_t end) {
      EXPECT_EQ(begin % 16, 0);
      EXPECT_LT(begin, end);
      for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST_P(ThreadPoolTest, MoreTasksThanOneRoundHolds) {
  auto [threads, spin] = GetParam();
  ThreadPool pool(threads, spin);
  const int n = 3 * 65535 + 17;  // a round holds 65535 tasks: this takes four
  std::vector<std::atomic<int>> hits(n);
  pool.run(n, [&](int task) { hits[task].fetch_add(1); });
  for (int i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "task " << i;
}

INSTANTIATE_TEST_SUITE_P(Policies, ThreadPoolTest,
                         ::testing::Values(std::make_pair(1, 0), std::make_pair(2, 0),
                                           std::make_pair(2, 200), std::make_pair(4, 50)),
                         [](const auto& param_info) {
                           return "threads" + std::to_string(param_info.param.first) + "_spin" +
                                  std::to_string(param_info.param.second);
                         });

}  // namespace
}  // namespace minfer
