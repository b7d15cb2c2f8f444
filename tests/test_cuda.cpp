// The CUDA backend end to end, against the CPU and against llama2.c's run.c. Every test here
// needs a GPU and says so when there is none; the op-by-op checks are in test_backend_ops.cpp.
#include <gtest/gtest.h>

#include "engine/backend.h"
#include "engine/decoder.h"
#include "models/llama.h"
#include "tests/test_support.h"

namespace minfer::test {
namespace {

#define SKIP_WITHOUT_CUDA()                                                  \
  do {                                                                       \
    std::string reason_;                                                     \
    if (cuda_device_count(&reason_) == 0)                                    \
      GTEST_SKIP() << "skipped: no CUDA device (" << reason_ << ")";          \
  } while (0)

std::vector<int32_t> greedy(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"generate", "-m", golden_path("stories260K.bin"), "--prompt-ids", "1", "-n", "256",
                                   "--temp", "0", "--print-ids", "--device", "cuda"};
  args.insert(args.end(), extra.begin(), extra.end());
  CliResult r = run_cli(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return parse_ids(r.out);
}

double agreement(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t same = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) same += a[i] == b[i];
  return b.empty() ? 0.0 : double(same) / double(b.size());
}

TEST(Cuda, GreedyIdsMatchRunCInF32) {
  SKIP_WITHOUT_CUDA();
  SKIP_WITHOUT_GOLDEN("stories260K.bin");
  std::vector<int32_t> expected = parse_ids(read_file(golden_path("stories260K.greedy.ids")));
  for (const char* kernels : {"fused", "unfused"})
    for (const char* gemm : {"cublas", "naive", "tiled"})
      EXPECT_EQ(greedy({"--kernels", kernels, "--gemm", gemm}), expected) << kernels << ", gemm " << gemm;
}

TEST(Cuda, GreedyIdsAgreeWithRunCInF16) {
  SKIP_WITHOUT_CUDA();
  SKIP_WITHOUT_GOLDEN("stories260K.bin");
  std::vector<int32_t> expected = parse_ids(read_file(golden_path("stories260K.greedy.ids")));
  for (const char* gemm : {"cublas", "mma"}) {
    double a = agreement(greedy({"--dtype", "f16", "--gemm", gemm}), expected);
    EXPECT_GE(a, 0.95) << "gemm " << gemm << ": " << a * 100 << "% of positions agree";
  }
}

TEST(Cuda, GraphsOnEqualsOff) {
  SKIP_WITHOUT_CUDA();
  SKIP_WITHOUT_GOLDEN("stories260K.bin");
  for (const char* dtype : {"f32", "f16"})
    for (const char* batch : {"1", "3"})
      EXPECT_EQ(greedy({"--dtype", dtype, "--graphs", "on", "--batch", batch}),
                greedy({"--dtype", dtype, "--graphs", "off", "--batch", batch}))
          << dtype << ", batch " << batch;
}

TEST(Cuda, FusedEqualsUnfusedInF16) {
  SKIP_WITHOUT_CUDA();
  SKIP_WITHOUT_GOLDEN("stories260K.bin");
  EXPECT_EQ(greedy({"--dtype", "f16", "--kernels", "fused"}), greedy({"--dtype", "f16", "--kernels", "unfused"}));
}

TEST(Cuda, PresetGivesTheCpuTokens) {
  SKIP_WITHOUT_CUDA();
  for (const char* preset : {"preset:tiny", "preset:stories15M"}) {
    auto run = [&](const char* device) {
      CliResult r = run_cli({"generate", "-m", preset, "--prompt-ids", "1,2,3,4,5,6,7,8,9,10", "-n", "48", "--temp",
                             "0", "--print-ids", "--device", device, "--batch", "2", "--ignore-eos"});
      EXPECT_EQ(r.exit_code, 0) << r.err;
      return r.out;
    };
    EXPECT_EQ(run("cuda"), run("cpu")) << preset;
  }
}

TEST(Cuda, LongPromptPrefillOnTensorCoresMatchesOneByOne) {
  SKIP_WITHOUT_CUDA();
  // 300 prompt tokens: prefill attention runs the 64-row Tensor Core tiles (an f16 cache, and
  // stories42M's head_dim of 64), one-by-one decode the flash-decoding kernel; the continuations
  // must agree.
  std::string prompt = "1";
  for (int i = 0; i < 299; ++i) prompt += "," + std::to_string(3 + (i * 37) % 500);
  auto run = [&](const char* prefill) {
    CliResult r = run_cli({"generate", "-m", "preset:stories42M", "--prompt-ids", prompt, "-n", "32", "--temp", "0",
                           "--print-ids", "--device", "cuda", "--dtype", "f16", "--prefill", prefill, "--ignore-eos"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return parse_ids(r.out);
  };
  EXPECT_GE(agreement(run("batched"), run("one-by-one")), 0.9);
}

TEST(Cuda, DecodeLoopAllocatesNothing) {
  SKIP_WITHOUT_CUDA();
  auto backend = make_backend(BackendKind::cuda);
  for (DType dtype : {DType::f32, DType::f16}) {
    LlamaOptions options;
    options.dtype = dtype;
    auto model = LlamaModel::load("preset:tiny", *backend, options);
    DecoderOptions dec;
    dec.n_seqs = 3;
    dec.n_ctx = 64;
    Decoder decoder(*model, dec);
    decoder.prefill({{1, 2, 3}, {1}, {1, 4}});
    std::vector<int32_t> next;
    decoder.argmax(&next);
    for (int warmup = 0; warmup < 3; ++warmup) {  // plain run, capture, first replay
      decoder.decode(next);
      decoder.argmax(&next);
    }
    const PoolStats device = backend->pool().stats(), pinned = backend->host_pool().stats();
    for (int step = 0; step < 30; ++step) {
      decoder.decode(next);
      decoder.argmax(&next);
      decoder.fetch_logits();
    }
    EXPECT_EQ(backend->pool().stats().requests, device.requests) << dtype_name(dtype);
    EXPECT_EQ(backend->host_pool().stats().requests, pinned.requests) << dtype_name(dtype);
  }
}

TEST(Cuda, DevicesCommandDescribesTheGpu) {
  SKIP_WITHOUT_CUDA();
  CliResult r = run_cli({"devices"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("compute capability"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensor cores"), std::string::npos) << r.out;
}

TEST(Cuda, WithoutAGpuCudaIsRefusedAndAutoFallsBack) {
  std::string reason;
  if (cuda_device_count(&reason) > 0) GTEST_SKIP() << "skipped: a CUDA device is present";
  CliResult cuda = run_cli({"generate", "-m", "preset:tiny", "-n", "4", "--device", "cuda"});
  EXPECT_EQ(cuda.exit_code, 1);
  EXPECT_NE(cuda.err.find("no CUDA device: "), std::string::npos) << cuda.err;
  CliResult automatic = run_cli({"generate", "-m", "preset:tiny", "-n", "4", "--temp", "0", "--print-ids", "--ignore-eos"});
  EXPECT_EQ(automatic.exit_code, 0) << automatic.err;
  EXPECT_NE(automatic.err.find("on cpu"), std::string::npos) << automatic.err;
}

}  // namespace
}  // namespace minfer::test
