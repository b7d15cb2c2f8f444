// The CUDA backend end to end, against the CPU and against llama2.c's run.c, and the cases of
// issue 57's GPU cliffs against the plain-loop references. Every test here needs a GPU and says
// so when there is none; the op-by-op checks are in test_backend_ops.cpp, the host's choices of
// kernel in test_cuda_choices.cpp.
#include <gtest/gtest.h>

#include <random>

#include "engine/backend.h"
#include "engine/decoder.h"
#include "model/llama.h"
#include "tests/greedy_check.h"
#include "tests/test_support.h"
#include "formats/model_files.h"
#include "kernels/ref/attention.h"
#include "kernels/ref/matmul.h"
#include "tests/op_harness.h"

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

// In f16 the fused and unfused kernels round differently (the online softmax, the fused Q/K/V
// product), so their ids must agree where the greedy choice is decisive, not everywhere.
TEST(Cuda, FusedEqualsUnfusedInF16) {
  SKIP_WITHOUT_CUDA();
  SKIP_WITHOUT_GOLDEN("stories260K.bin");
  auto backend = make_backend(BackendKind::cuda);
  LlamaOptions fused, unfused;
  fused.dtype = unfused.dtype = DType::f16;
  unfused.kernels = Kernels::unfused;
  GreedyRun a = greedy_run(*backend, golden_path("stories260K.bin"), fused, {1}, 200);
  GreedyRun b = greedy_run(*backend, golden_path("stories260K.bin"), unfused, {1}, 200);
  EXPECT_GE(expect_same_ids_where_decisive(a, b, 0.05, "fused against unfused, f16"), 20u);
}

// Random presets: the logits after the prompt within f32 rounding of the CPU's, and the greedy
// ids equal wherever the CPU's choice is decisive (tests/greedy_check.h says why not everywhere).
TEST(Cuda, PresetGivesTheCpuTokens) {
  SKIP_WITHOUT_CUDA();
  auto cpu = make_backend(BackendKind::cpu);
  auto cuda = make_backend(BackendKind::cuda);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  for (const char* preset : {"preset:tiny", "preset:stories15M"}) {
    GreedyRun expected = greedy_run(*cpu, preset, LlamaOptions{}, prompt, 48);
    GreedyRun got = greedy_run(*cuda, preset, LlamaOptions{}, prompt, 48);
    EXPECT_LE(nmse(expected.first_logits, got.first_logits), 1e-9) << preset;
    EXPECT_GE(expect_same_ids_where_decisive(expected, got, 1e-3, preset), 8u) << preset;
  }
}

// 300 prompt tokens: batched prefill runs the 64-row Tensor Core tiles (an f16 cache, and
// stories42M's head_dim of 64), one-by-one decode the flash-decoding kernel. Both round q, k, v
// and the probabilities to f16 in different places: the logits after the prompt agree within f16
// limits, and the continuations wherever the choice is decisive.
TEST(Cuda, LongPromptPrefillOnTensorCoresMatchesOneByOne) {
  SKIP_WITHOUT_CUDA();
  auto cuda = make_backend(BackendKind::cuda);
  std::vector<int32_t> prompt = {1};
  for (int i = 0; i < 299; ++i) prompt.push_back(3 + (i * 37) % 500);
  LlamaOptions f16;
  f16.dtype = DType::f16;
  GreedyRun one_by_one = greedy_run(*cuda, "preset:stories42M", f16, prompt, 32, true);
  GreedyRun batched = greedy_run(*cuda, "preset:stories42M", f16, prompt, 32, false);
  EXPECT_LE(nmse(one_by_one.first_logits, batched.first_logits), 5e-3);
  expect_same_ids_where_decisive(one_by_one, batched, 0.05, "batched against one-by-one prefill, f16");
}

// Issue: recorded decode steps used to outlive the scratch buffers they wrote into. A decoder of
// one sequence records its step; a decoder of 16 on the same backend grows the attention scratch
// (moving it); the first decoder's steps must then give what a fresh backend gives.
TEST(Cuda, GraphsSurviveALargerRequestOnTheSameBackend) {
  SKIP_WITHOUT_CUDA();
  auto run = [](Backend& backend, Model& model, int64_t n_seqs, int steps) {
    DecoderOptions dec;
    dec.n_seqs = n_seqs;
    dec.n_ctx = 200;
    Decoder decoder(model, dec);
    decoder.prefill(std::vector<std::vector<int32_t>>(static_cast<size_t>(n_seqs), {1, 7, 9}));
    std::vector<int32_t> next, ids;
    for (int i = 0; i < steps; ++i) {
      decoder.argmax(&next);
      ids.push_back(next[0]);
      decoder.decode(next);
    }
    backend.synchronize();
    return ids;
  };
  auto fresh = make_backend(BackendKind::cuda);
  auto fresh_model = load_model("preset:tiny", *fresh, LlamaOptions{});
  const std::vector<int32_t> expected = run(*fresh, *fresh_model, 1, 40);
  auto shared = make_backend(BackendKind::cuda);
  auto model = load_model("preset:tiny", *shared, LlamaOptions{});
  model->reserve(2048, 16);  // the model's activations fit both decoders: only the backend's scratch moves
  DecoderOptions small;
  small.n_ctx = 200;
  Decoder first(*model, small);
  first.prefill({{1, 7, 9}});
  std::vector<int32_t> next, ids;
  for (int i = 0; i < 5; ++i) {  // recorded and replayed
    first.argmax(&next);
    ids.push_back(next[0]);
    first.decode(next);
  }
  run(*shared, *model, 16, 20);  // grows the scratch buffers
  for (int i = 5; i < 40; ++i) {
    first.argmax(&next);
    ids.push_back(next[0]);
    first.decode(next);
  }
  EXPECT_EQ(ids, expected);
}

// Gemma-like activations near 1e5, past f16's 65504 (issue 57): the products that round
// activations to f16 for Tensor Cores (f16 weights through cuBLASLt, quantized weights of more
// than kQuantRowsMaxRows rows dequantized to f16 slabs, --gemm mma) scale them by a power of two
// instead of overflowing to inf; bf16 has the range; gemm_quant_rows (9 to 64 rows of quantized
// weights) stays f32. Each against ref::matmul: finite, within f16 products' NMSE.
TEST(Cuda, ProductsTakeActivationsPastF16Range) {
  SKIP_WITHOUT_CUDA();
  struct Product {
    const char* backend;
    DType w;
    int64_t M;
  };
  const int64_t N = 96, K = 512;
  for (const Product& p : {Product{"cuda", DType::f16, 16}, Product{"cuda", DType::bf16, 16},
                           Product{"cuda", DType::q8_0, 100}, Product{"cuda", DType::q4_k, 100},
                           Product{"cuda", DType::q4_k, 9}, Product{"cuda", DType::q6_k, 64},
                           Product{"cuda-mma", DType::f16, 16}}) {
    const std::string label = std::string(p.backend) + " " + dtype_name(p.w) + " M" + std::to_string(p.M);
    std::string reason;
    Backend* backend = backend_by_name(p.backend, &reason);
    ASSERT_NE(backend, nullptr) << reason;
    std::mt19937 rng(57);
    Tensor x = host_random({p.M, K}, rng, -1.0f, 1.0f);
    float* xs = x.data_as<float>();
    for (int64_t i = 0; i < x.numel(); i += 7) xs[i] = (i % 2 == 0 ? 1.0f : -1.0f) * (0.8e5f + 0.4e5f * xs[i + 1]);
    Tensor w = host_random({N, K}, rng, -1.0f, 1.0f, p.w);
    Tensor out = backend->empty({p.M, N}, DType::f32);
    backend->matmul(out, to_backend(*backend, x), to_backend(*backend, w));
    Tensor expected = host_tensor({p.M, N}, DType::f32);
    ref::matmul(expected.data_as<float>(), N, xs, K, w.data(), p.w, p.M, N, K);
    expect_close(expected, to_host(out), 5e-4, label);
  }
}

// A mixed serving step of more than 64 rows (issue 57): decode rows of three sequences around a
// prompt's 200 consecutive rows, so that tiles 0 and 3 of 64 rows mix kinds and tiles 1 and 2 are
// one prompt's. The Tensor Core tiles take tiles 1 and 2, flash-decoding every other row, each
// skipping the other's; every row must equal ref::attention's (within the tiles' f16 and bf16
// rounding), none twice written or left out. An f32 cache takes flash-decoding for every row.
TEST(Cuda, MixedStepAttendsEveryRowOnce) {
  SKIP_WITHOUT_CUDA();
  auto backend = make_backend(BackendKind::cuda);
  const int64_t heads = 4, kv_heads = 2, n_seqs = 4, block = 16, width = 32;  // 512 positions a sequence
  std::mt19937 rng(57);
  std::vector<int32_t> seq, pos;
  auto decode_rows = [&](int n) {
    for (int i = 0; i < n; ++i) {
      seq.push_back(static_cast<int32_t>(rng() % 3));
      pos.push_back(static_cast<int32_t>(rng() % (width * block)));
    }
  };
  decode_rows(40);
  for (int32_t p = 100; p < 300; ++p) {  // rows 40 .. 239
    seq.push_back(3);
    pos.push_back(p);
  }
  decode_rows(10);  // rows 240 .. 249, in tile 3 with the prompt's last 48
  const int64_t M = static_cast<int64_t>(seq.size());
  std::vector<int32_t> table(static_cast<size_t>(n_seqs * width));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  auto ids = [&](const std::vector<int32_t>& v) {
    Tensor h = host_tensor({int64_t(v.size())}, DType::i32);
    std::copy(v.begin(), v.end(), h.data_as<int32_t>());
    return to_backend(*backend, h);
  };
  for (DType cache : {DType::f16, DType::bf16, DType::f32})
    for (int64_t head_dim : {64, 128}) {
      const std::string label = std::string(dtype_name(cache)) + " cache, heads of " + std::to_string(head_dim);
      Tensor k = host_random({n_seqs * width, kv_heads, block, head_dim}, rng, -1, 1, cache);
      Tensor v = host_random({n_seqs * width, kv_heads, block, head_dim}, rng, -1, 1, cache);
      Tensor q = host_random({M, heads * head_dim}, rng, -2, 2);
      Tensor out = backend->empty({M, heads * head_dim}, DType::f32);
      const AttentionSpec spec{head_dim, 0.0f, 0};
      backend->attention(out, to_backend(*backend, q), to_backend(*backend, k), to_backend(*backend, v),
                         ids(table).reshape({n_seqs, width}), ids(seq), ids(pos), spec,
                         AttentionAlgorithm::online_softmax);
      Tensor expected = host_tensor({M, heads * head_dim}, DType::f32);
      ref::attention(expected.data_as<float>(), heads * head_dim, q.data_as<float>(), heads * head_dim, k.data(),
                     v.data(), cache, {table.data(), width, block}, seq.data(), pos.data(), M, heads, kv_heads,
                     head_dim, spec.score_scale(), 0);
      expect_close(expected, to_host(out), cache == DType::f32 ? 1e-9 : cache == DType::f16 ? 5e-4 : 2e-3, label);
    }
}

// Flash-decoding's splits depend on the rows, heads and SMs, not on the positions (issue 57): a
// decode step recorded at position 3 must replay correctly at positions that fill many chunks
// (Qwen3's shape, one layer: 16 heads of 128, a context of 2048, so 32 splits of at least 64
// keys on any GPU of 64 SMs or more). Graphs on against off, f16 and bf16 caches.
TEST(Cuda, RecordedDecodeStaysRightAsPositionsGrow) {
  SKIP_WITHOUT_CUDA();
  auto run = [](bool graphs, DType kv) {
    BackendOptions options;
    options.graphs = graphs;
    auto backend = make_backend(BackendKind::cuda, options);
    LlamaOptions f16;
    f16.dtype = DType::f16;
    auto model = load_model("preset:qwen3-0.6b:layers=1", *backend, f16);
    DecoderOptions dec;
    dec.n_ctx = 2048;
    dec.kv_dtype = kv;
    Decoder decoder(*model, dec);
    decoder.prefill({{1, 7, 9}});
    std::vector<int32_t> next, ids;
    for (int i = 0; i < 600; ++i) {
      decoder.argmax(&next);
      ids.push_back(next[0]);
      decoder.decode(next);
    }
    return ids;
  };
  for (DType kv : {DType::f16, DType::bf16}) EXPECT_EQ(run(true, kv), run(false, kv)) << dtype_name(kv);
}

TEST(Cuda, DecodeLoopAllocatesNothing) {
  SKIP_WITHOUT_CUDA();
  auto backend = make_backend(BackendKind::cuda);
  for (DType dtype : {DType::f32, DType::f16}) {
    LlamaOptions options;
    options.dtype = dtype;
    auto model = load_model("preset:tiny", *backend, options);
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
