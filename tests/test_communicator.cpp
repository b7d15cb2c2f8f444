// The one-process communicator (engine/communicator.h), what every run without mpirun gets: size
// 1, collectives that leave their tensors as a one-rank sum, broadcast and gather would, the same
// argument checks as MPI's (tests/mpi/ runs MPI's over several ranks), and its counters.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "engine/communicator.h"
#include "tests/op_harness.h"
#include "tests/test_support.h"

namespace minfer {
namespace {

Tensor host(const std::vector<float>& values) {
  Tensor t = test::host_tensor({int64_t(values.size())}, DType::f32);
  for (size_t i = 0; i < values.size(); ++i) t.data_as<float>()[i] = values[i];
  return t;
}

TEST(Communicator, WithoutMpirunTheWorldIsOneProcess) {
  ASSERT_FALSE(started_by_mpi_launcher()) << "this test runs outside mpirun";
  Communicator& world = world_communicator();
  EXPECT_EQ(world.size(), 1);
  EXPECT_EQ(world.rank(), 0);
  EXPECT_EQ(world.name(), "one process");
  EXPECT_EQ(&world, &world_communicator());
}

TEST(Communicator, OneProcessSumsBroadcastsAndGathersToItself) {
  LocalCommunicator comm;
  const Tensor x = host({1.5f, -2.0f, 3.25f});
  comm.all_reduce_sum(x);
  comm.broadcast(x, 0);
  EXPECT_EQ(x.data_as<float>()[2], 3.25f);
  const Tensor out = host({0, 0, 0});
  comm.all_gather(out, x, {3});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out.data_as<float>()[i], x.data_as<float>()[i]);
  EXPECT_EQ(comm.stats().all_reduces, 1u);
  EXPECT_EQ(comm.stats().all_reduce_bytes, 12u);
  comm.reset_stats();
  EXPECT_EQ(comm.stats().all_reduces, 0u);
}

TEST(Communicator, BadArgumentsAreRefusedInOneLine) {
  LocalCommunicator comm;
  const Tensor x = host({1, 2, 3, 4});
  const Tensor wide = test::host_tensor({2, 4}, DType::f32);
  const Tensor ints = test::host_tensor({4}, DType::i32);
  EXPECT_EQ(test::error_of([&] { comm.all_reduce_sum(ints); }), "all_reduce_sum: x i32[4] cpu is not f32");
  EXPECT_EQ(test::error_of([&] { comm.all_reduce_sum(wide.slice(1, 0, 2)); }),
            "all_reduce_sum: x f32[2, 2] cpu is not contiguous");
  EXPECT_EQ(test::error_of([&] { comm.broadcast(x, 1); }), "broadcast: root 1 of 1 ranks");
  EXPECT_EQ(test::error_of([&] { comm.all_gather(x, x, {4, 0}); }), "all_gather: 2 counts for 1 ranks");
  EXPECT_EQ(test::error_of([&] { comm.all_gather(x, x, {3}); }), "all_gather: part f32[4] cpu on rank 0, whose count is 3");
  EXPECT_EQ(test::error_of([&] { comm.all_gather(wide, x, {4}); }), "all_gather: out f32[2, 4] cpu for counts summing to 4");
  EXPECT_EQ(test::error_of([&] { comm.all_gather(ints, x, {4}); }),
            "all_gather: out i32[4] cpu and part f32[4] cpu differ in type");
  EXPECT_EQ(test::error_of([&] { comm.all_gather(x, x, {-1}); }), "all_gather: a count of -1");
  LocalCommunicator gpu(DeviceKind::cuda);
  EXPECT_EQ(test::error_of([&] { gpu.all_reduce_sum(x); }),
            "all_reduce_sum: x is on cpu, the one process communicator moves cuda memory");
  EXPECT_EQ(comm.stats().all_reduces, 0u);
}

}  // namespace
}  // namespace minfer
