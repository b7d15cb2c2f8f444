// MPI's communicator (engine/communicator_mpi.cpp) over real ranks: ctest starts this binary with
// mpirun -np 2, and -np 3 over TCP alone (tests/CMakeLists.txt); every rank runs every test, so
// each collective is called by all ranks in the same order. Values are chosen so a sum, broadcast
// or gather that took a wrong rank's bytes, or a wrong offset, gives a different number.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/backend_cpu.h"
#include "engine/communicator.h"
#include "engine/roofline.h"
#include "tests/op_harness.h"

namespace minfer {
namespace {

Tensor host(int64_t n, DType dtype = DType::f32) { return test::host_tensor({n}, dtype); }

Communicator& world() { return world_communicator(); }

// Every rank's copy of x, gathered: rank r's at [r n, (r + 1) n).
std::vector<float> everyones(const Tensor& x) {
  const int64_t n = x.numel();
  Tensor all = host(n * world().size());
  world().all_gather(all, x, std::vector<int64_t>(size_t(world().size()), n));
  return std::vector<float>(all.data_as<float>(), all.data_as<float>() + all.numel());
}

TEST(Mpi, TheWorldIsTheRanksMpirunStarted) {
  ASSERT_TRUE(started_by_mpi_launcher());
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  ASSERT_NE(size, nullptr);
  EXPECT_EQ(world().size(), std::atoi(size));
  EXPECT_EQ(world().name(), "MPI (" + std::string(size) + " ranks)");
  EXPECT_GE(world().size(), 2) << "start this test with mpirun -np 2 or more";
}

// Sizes of 1, odd, and 1 Mi floats (several of the transports' segments).
TEST(Mpi, AllReduceSumsEveryRanksValuesOnEveryRank) {
  const int R = world().size(), me = world().rank();
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(1001), int64_t(1) << 20}) {
    Tensor x = host(n);
    for (int64_t i = 0; i < n; ++i) x.data_as<float>()[i] = float((me + 1) * (i % 1000)) + 0.25f * float(me);
    world().all_reduce_sum(x);
    // sum over r of (r + 1) m + r / 4 = m R (R + 1) / 2 + R (R - 1) / 8, exact in f32 here
    int wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float want = float(R * (R + 1) / 2 * (i % 1000)) + 0.125f * float(R * (R - 1));
      wrong += x.data_as<float>()[i] != want;
    }
    EXPECT_EQ(wrong, 0) << n << " floats on rank " << me;
  }
}

// Sums whose rounding depends on their order: every rank must still hold the same bits, or the
// ranks' residual streams would drift apart.
TEST(Mpi, AllReduceGivesEveryRankTheSameBits) {
  const int me = world().rank();
  Tensor x = host(4099);
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = 0.1f * float(me + 1) + 1e-7f * float(i * (me + 3));
  world().all_reduce_sum(x);
  const std::vector<float> all = everyones(x);
  for (int r = 1; r < world().size(); ++r)
    EXPECT_EQ(std::memcmp(all.data(), all.data() + r * x.numel(), size_t(x.nbytes())), 0) << "rank " << r;
}

TEST(Mpi, BroadcastGivesEveryRankTheRootsBytes) {
  for (int root = 0; root < world().size(); ++root) {
    Tensor t = host(37, DType::i32);
    for (int i = 0; i < 37; ++i) t.data_as<int32_t>()[i] = world().rank() * 1000 + i;
    world().broadcast(t, root);
    for (int i = 0; i < 37; ++i) ASSERT_EQ(t.data_as<int32_t>()[i], root * 1000 + i) << "root " << root;
  }
}

// Uneven parts, and an empty one at -np 3: rank r gives 3 r + 2 values, rank 2 none, in rank order.
TEST(Mpi, AllGatherJoinsUnevenPartsInRankOrder) {
  const int R = world().size(), me = world().rank();
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (int r = 0; r < R; ++r) {
    counts.push_back(r == 2 ? 0 : 3 * r + 2);
    total += counts.back();
  }
  Tensor part = host(counts[size_t(me)]), out = host(total);
  for (int64_t i = 0; i < part.numel(); ++i) part.data_as<float>()[i] = float(me * 100 + i);
  world().all_gather(out, part, counts);
  int64_t at = 0;
  for (int r = 0; r < R; ++r)
    for (int64_t i = 0; i < counts[size_t(r)]; ++i, ++at) ASSERT_EQ(out.data_as<float>()[at], float(r * 100 + i));
  // Parts of odd byte counts (f16, 2 r + 1 values) take the byte path, not 4-byte words.
  std::vector<int64_t> halves;
  for (int r = 0; r < R; ++r) halves.push_back(2 * r + 1);
  Tensor half_part = host(2 * me + 1, DType::f16), half_out = host(R * R, DType::f16);
  for (int64_t i = 0; i < half_part.numel(); ++i) static_cast<uint16_t*>(half_part.data())[i] = uint16_t(me * 100 + i);
  world().all_gather(half_out, half_part, halves);
  at = 0;
  for (int r = 0; r < R; ++r)
    for (int64_t i = 0; i < 2 * r + 1; ++i, ++at)
      ASSERT_EQ(static_cast<const uint16_t*>(half_out.data())[at], uint16_t(r * 100 + i));
}

TEST(Mpi, StatsCountTheAllReducesAndTheirBytes) {
  world().reset_stats();
  Tensor x = host(576);
  for (int i = 0; i < 3; ++i) world().all_reduce_sum(x);
  world().barrier();
  EXPECT_EQ(world().stats().all_reduces, 3u);
  EXPECT_EQ(world().stats().all_reduce_bytes, 3u * 576 * 4);
  EXPECT_GT(world().stats().all_reduce_seconds, 0.0);
}

// bench --roofline's communication row: 5 x 20 all-reduces of the size asked, the best of them
// within 1.5x of their mean as the stats saw it (the loop's timer wraps a little more than the calls).
TEST(Mpi, TheRooflinesCommunicationRowTimesAllReducesOfItsSize) {
  world().reset_stats();
  CpuBackend cpu(BackendOptions{});
  const double best = measure_all_reduce_seconds(world(), cpu, 576);
  const CommunicatorStats stats = world().stats();
  EXPECT_EQ(stats.all_reduces, 100u);
  EXPECT_EQ(stats.all_reduce_bytes, 100u * 576 * 4);
  EXPECT_GT(best, 0.0);
  EXPECT_LE(best, stats.all_reduce_seconds / 100 * 1.5);  // (the timer around the loop, not inside each call)
}

// Checked on each rank before anything is sent: every rank refuses alike, and none is left waiting.
TEST(Mpi, BadArgumentsAreRefusedBeforeAnythingIsSent) {
  Tensor ints = host(4, DType::i32);
  EXPECT_THROW(world().all_reduce_sum(ints), Error);
  EXPECT_THROW(world().broadcast(ints, world().size()), Error);
  EXPECT_THROW(world().all_gather(ints, ints, {4}), Error);
  world().barrier();
}

// Not run by default: tests/mpi/check_rank_death.sh runs it alone. The last rank dies while the
// others wait in an all-reduce; mpirun must end them with a non-zero status naming the rank.
TEST(MpiRankDeath, DISABLED_TheOthersEndWithTheRun) {
  Tensor x = host(16);
  if (world().rank() == world().size() - 1) std::raise(SIGKILL);
  world().all_reduce_sum(x);
  ADD_FAILURE() << "an all-reduce returned with a rank dead";
}

}  // namespace
}  // namespace minfer
