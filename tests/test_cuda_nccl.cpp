// The NCCL communicator (engine/communicator_nccl.cu) on one GPU: its collectives at one rank, and a
// model whose passes run through it against the whole model. Between GPUs it needs mpirun and
// a GPU a rank; tools/gpu-check.sh runs decode through it at -np 1. Without a GPU (or NCCL) these
// say so, and the refusal is checked here.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/communicator.h"
#include "model/llama.h"
#include "tests/greedy_check.h"
#include "tests/op_harness.h"
#include "tests/test_support.h"

namespace minfer::test {
namespace {

bool have_nccl_and_gpu(std::string* reason) {
  if (!MINFER_HAVE_NCCL) {
    *reason = "this build has no NCCL";
    return false;
  }
  return cuda_device_count(reason) > 0;
}

#define SKIP_WITHOUT_NCCL_GPU()                                          \
  do {                                                                   \
    std::string reason_;                                                 \
    if (!have_nccl_and_gpu(&reason_)) GTEST_SKIP() << "skipped: " << reason_; \
  } while (0)

Tensor on_device(Backend& cuda, const std::vector<float>& values) {
  Tensor host = Tensor::wrap(const_cast<float*>(values.data()), {int64_t(values.size())}, DType::f32, DeviceKind::cpu);
  Tensor x = cuda.empty({int64_t(values.size())}, DType::f32);
  cuda.copy_async(x, host);
  cuda.synchronize();
  return x;
}

std::vector<float> values_of(const Tensor& x) {
  const Tensor host = to_host(x);
  return std::vector<float>(host.data_as<float>(), host.data_as<float>() + host.numel());
}

TEST(Communicator, NcclWantsACudaBackend) {
  LocalCommunicator world;
  auto cpu = make_backend(BackendKind::cpu);
  try {
    make_nccl_communicator(world, *cpu);
    FAIL() << "NCCL on the CPU backend was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("a CUDA stream is asked of the cpu") != std::string::npos ||
                what.find("built without CUDA or without NCCL") != std::string::npos)
        << what;
  }
}

// One rank: a sum or a broadcast leaves its values, a gather copies them. Each is enqueued right
// after a device copy into x, with no synchronisation between: on another stream than the
// backend's, a collective could read x before the copy wrote it.
TEST(Cuda, NcclOfOneRankSumsBroadcastsAndGathersInOrderOnTheBackendsStream) {
  SKIP_WITHOUT_NCCL_GPU();
  LocalCommunicator world;
  auto cuda = make_backend(BackendKind::cuda);
  std::unique_ptr<Communicator> nccl = make_nccl_communicator(world, *cuda);
  EXPECT_EQ(nccl->size(), 1);
  EXPECT_EQ(nccl->device(), DeviceKind::cuda);
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f};
  constexpr int64_t n = 1 << 20;  // a copy long enough to be in flight
  std::vector<float> big(size_t(n), 0.5f);
  big[0] = 9.0f;
  const Tensor source = on_device(*cuda, big), x = on_device(*cuda, std::vector<float>(big.size(), 0.0f));
  const Tensor gathered = cuda->empty({n}, DType::f32);
  cuda->copy_async(x, source);
  nccl->all_reduce_sum(x);
  nccl->broadcast(x, 0);
  nccl->all_gather(gathered, x, {n});
  cuda->synchronize();
  EXPECT_EQ(values_of(gathered), big);
  const Tensor small = on_device(*cuda, values);
  nccl->all_reduce_sum(small);
  cuda->synchronize();
  EXPECT_EQ(values_of(small), values);
  EXPECT_EQ(nccl->stats().all_reduces, 2u);
  nccl->barrier();
  const std::vector<float> on_host = values;
  EXPECT_THROW(nccl->all_reduce_sum(Tensor::wrap(const_cast<float*>(on_host.data()), {5}, DType::f32, DeviceKind::cpu)),
               Error);  // host memory, refused before NCCL sees it
}

// The split path on a GPU (shards, NCCL's all-reduces after wo and w2, the logits' gather) at one
// rank holds every head: the same logits and greedy ids as the whole model.
TEST(Cuda, AModelThroughNcclOfOneRankEqualsTheWholeModel) {
  SKIP_WITHOUT_NCCL_GPU();
  auto cuda = make_backend(BackendKind::cuda);
  LocalCommunicator world;
  const std::vector<int32_t> prompt = {1, 5, 9, 3, 7};
  for (const char* file : {"qwen2-f32.gguf", "llama3-q8_0.gguf"}) {
    const std::string spec = std::string(MINFER_SOURCE_DIR) + "/tests/data/models/" + file;
    LlamaOptions whole, through_nccl;
    through_nccl.communicator = &world;
    const GreedyRun expected = greedy_run(*cuda, spec, whole, prompt, 16);
    const GreedyRun actual = greedy_run(*cuda, spec, through_nccl, prompt, 16);
    EXPECT_LT(nmse(expected.first_logits, actual.first_logits), 1e-10) << file;
    expect_same_ids_where_decisive(expected, actual, 1e-3, file);
  }
}

}  // namespace
}  // namespace minfer::test
