// The decoder end to end on the CPU: batches give the same tokens as one sequence, batched
// prefill the same as token-by-token, fused kernels the same as unfused; presets and generated
// checkpoints agree; requests that do not fit are refused; the decode loop allocates nothing.
#include <gtest/gtest.h>

#include "engine/backend.h"
#include "engine/decoder.h"
#include "core/error.h"
#include "model/llama.h"
#include "tests/test_support.h"
#include "formats/model_files.h"

namespace minfer::test {
namespace {

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::vector<std::string> greedy_rows(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"generate", "-m", golden_path("stories260K.bin"), "--temp", "0",
                                   "--print-ids", "--device", "cpu"};
  args.insert(args.end(), extra.begin(), extra.end());
  CliResult r = run_cli(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return lines(r.out);
}

// The cache type chosen when none is asked for, decided on the host for every weight type: every
// choice is one the KV cache takes (a 4-bit GGUF on CUDA once asked for a q4_k cache and failed).
TEST(Decoder, TheDefaultKvTypeIsACacheTypeForEveryWeightType) {
  for (int t = 0; t <= static_cast<int>(DType::q6_k); ++t) {
    const DType weights = static_cast<DType>(t);
    if (weights == DType::i32) continue;
    EXPECT_EQ(default_kv_dtype(DeviceKind::cpu, weights), DType::f32) << dtype_name(weights);
    const DType cuda = default_kv_dtype(DeviceKind::cuda, weights);
    EXPECT_TRUE(cuda == DType::f32 || cuda == DType::f16 || cuda == DType::bf16) << dtype_name(weights);
    EXPECT_EQ(cuda, is_quantized(weights) ? DType::f16 : weights) << dtype_name(weights);
  }
}

TEST(Decoder, BatchSizesGiveTheSameGreedyIds) {
  SKIP_WITHOUT_GOLDEN("stories260K.bin");
  std::vector<std::string> one = greedy_rows({"--prompt-ids", "1", "-n", "200", "--batch", "1"});
  ASSERT_EQ(one.size(), 1u);
  for (const char* batch : {"3", "8"}) {
    std::vector<std::string> rows = greedy_rows({"--prompt-ids", "1", "-n", "200", "--batch", batch});
    ASSERT_EQ(rows.size(), size_t(std::stoi(batch)));
    for (const auto& row : rows) EXPECT_EQ(row, one[0]) << "--batch " << batch;
  }
}

TEST(Decoder, BatchedPrefillEqualsOneByOne) {
  SKIP_WITHOUT_GOLDEN("stories260K.bin");
  SKIP_WITHOUT_GOLDEN("stories260K.greedy.ids");
  // The greedy run's own first 40 ids as a prompt: greedy decoding must continue exactly as the
  // reference run did, whichever way the prompt is fed.
  std::vector<int32_t> golden = parse_ids(read_file(golden_path("stories260K.greedy.ids")));
  std::string prompt = "1";
  for (int i = 0; i < 40; ++i) prompt += "," + std::to_string(golden[i]);
  std::string expected;
  for (int i = 40; i < 140; ++i) expected += (i > 40 ? "," : "") + std::to_string(golden[i]);
  auto batched = greedy_rows({"--prompt-ids", prompt, "-n", "100", "--batch", "2"});
  auto one_by_one = greedy_rows({"--prompt-ids", prompt, "-n", "100", "--prefill", "one-by-one"});
  ASSERT_EQ(batched.size(), 2u);
  ASSERT_EQ(one_by_one.size(), 1u);
  EXPECT_EQ(batched[0], expected);
  EXPECT_EQ(batched[1], expected);
  EXPECT_EQ(one_by_one[0], expected);
}

TEST(Decoder, FusedAndUnfusedKernelsGiveTheSameIds) {
  SKIP_WITHOUT_GOLDEN("stories260K.bin");
  auto fused = greedy_rows({"--prompt-ids", "1,2,3,4,5", "-n", "150", "--kernels", "fused", "--batch", "2"});
  auto unfused = greedy_rows({"--prompt-ids", "1,2,3,4,5", "-n", "150", "--kernels", "unfused", "--batch", "2"});
  EXPECT_EQ(fused, unfused);
}

TEST(Decoder, SeedReproducesSampledTokens) {
  SKIP_WITHOUT_GOLDEN("stories260K.bin");
  auto run = [](const char* seed) {
    return run_cli({"generate", "-m", golden_path("stories260K.bin"), "-n", "100", "--temp", "0.8",
                    "--seed", seed, "--batch", "3", "--print-ids", "--device", "cpu"}).out;
  };
  std::string a = run("7"), b = run("7"), c = run("8");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  auto rows = lines(a);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_NE(rows[0], rows[1]) << "sequence i samples with seed + i";
}

TEST(Decoder, RequestLongerThanTheContextIsRefused) {
  SKIP_WITHOUT_GOLDEN("stories260K.bin");
  // 1 prompt token + 512 new tokens need 512 positions: exactly the context, accepted.
  CliResult ok = run_cli({"generate", "-m", golden_path("stories260K.bin"), "-n", "512", "--temp", "0",
                          "--print-ids", "--device", "cpu"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  CliResult r = run_cli({"generate", "-m", golden_path("stories260K.bin"), "--prompt-ids", "1,2", "-n",
                         "512", "--temp", "0", "--device", "cpu"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("513 positions > context 512"), std::string::npos) << r.err;
}

TEST(Decoder, PresetAndItsWrittenCheckpointAgree) {
  ScratchDir dir("preset");
  for (const char* format : {"v0", "v1"}) {
    std::string path = dir.file(std::string("tiny-") + format + ".bin");
    CliResult made = run_cli({"make-model", "--preset", "tiny", "--format", format, "-o", path});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    auto from_file = run_cli({"generate", "-m", path, "-n", "64", "--temp", "0", "--print-ids", "--device", "cpu"});
    auto from_preset = run_cli({"generate", "-m", "preset:tiny", "-n", "64", "--temp", "0", "--print-ids", "--device", "cpu"});
    ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
    ASSERT_EQ(from_preset.exit_code, 0) << from_preset.err;
    EXPECT_EQ(from_file.out, from_preset.out) << format;
    EXPECT_GE(parse_ids(from_file.out).size(), 1u);
  }
}

TEST(Decoder, SeparateClassifierAndGroupedQueryShapesRun) {
  ScratchDir dir("shapes");
  std::string path = dir.file("odd.bin");
  CliResult made = run_cli({"make-model", "--dim", "96", "--hidden-dim", "250", "--layers", "3", "--heads",
                            "12", "--kv-heads", "3", "--vocab", "300", "--seq-len", "64",
                            "--separate-classifier", "-o", path});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  for (const char* kernels : {"fused", "unfused"}) {
    CliResult r = run_cli({"generate", "-m", path, "--prompt-ids", "1,5,9", "-n", "40", "--temp", "0",
                           "--print-ids", "--device", "cpu", "--kernels", kernels});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(parse_ids(r.out).empty());
  }
}

TEST(Decoder, AnF16CacheHalvesTheBytesAndBatchesStillAgree) {
  auto backend = make_backend(BackendKind::cpu);
  auto model = load_model("preset:tiny", *backend, {});
  DecoderOptions options;
  options.n_seqs = 2;
  options.n_ctx = 64;
  Decoder f32_cache(*model, options);
  options.kv_dtype = DType::f16;
  Decoder f16_cache(*model, options);
  EXPECT_EQ(f32_cache.cache().dtype(), DType::f32);
  EXPECT_EQ(f16_cache.cache().dtype(), DType::f16);
  EXPECT_EQ(f16_cache.cache().bytes() * 2, f32_cache.cache().bytes());
  // Through the CLI: the cache line names f16, and a batch decodes each row as one sequence does.
  std::vector<std::string> args = {"generate", "-m", "preset:tiny", "--prompt-ids", "1,7,9", "-n", "40",
                                   "--temp", "0", "--print-ids", "--device", "cpu", "--kv-dtype", "f16"};
  CliResult one = run_cli(args);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.err.find("(f16, 1 sequences"), std::string::npos) << one.err;
  args.insert(args.end(), {"--batch", "3"});
  CliResult three = run_cli(args);
  ASSERT_EQ(three.exit_code, 0) << three.err;
  std::vector<std::string> rows = lines(three.out);
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& row : rows) EXPECT_EQ(row, lines(one.out).at(0));
}

// What a prompt cache keeps: the held tokens that begin the prompt, never its last token (whose
// logits are wanted), whatever is held beyond it.
TEST(Decoder, ReusablePrefixStopsShortOfThePromptsLastToken) {
  EXPECT_EQ(reusable_prefix({}, {1, 2, 3}), 0);
  EXPECT_EQ(reusable_prefix({1, 2, 3}, {1, 2, 3}), 2);
  EXPECT_EQ(reusable_prefix({1, 2, 3, 4, 5}, {1, 2, 3}), 2);
  EXPECT_EQ(reusable_prefix({1, 2}, {1, 2, 3, 4}), 2);
  EXPECT_EQ(reusable_prefix({1, 9, 3}, {1, 2, 3, 4}), 1);
  EXPECT_EQ(reusable_prefix({7}, {1, 2}), 0);
  EXPECT_EQ(reusable_prefix({1, 2}, {1}), 0);
  EXPECT_EQ(reusable_prefix({1, 2}, {}), 0);
}

// The bytes a decoder checks against the device before reserving (Model::activation_bytes) are
// what reserve() then takes from the pool, up to the pool's rounding of each of the nine buffers
// to 256 bytes; a second, smaller reserve takes nothing.
TEST(Decoder, ActivationBytesAreWhatReserveAllocates) {
  auto backend = make_backend(BackendKind::cpu);
  std::unique_ptr<LlamaModel> model;
  for (auto [rows, logit_rows] : {std::pair<int64_t, int64_t>{37, 5}, {300, 300}}) {
    model = load_model("preset:tiny", *backend, {});  // a model with no workspace yet
    const size_t before = backend->pool().stats().allocated_bytes;
    model->reserve(rows, logit_rows);
    const size_t taken = backend->pool().stats().allocated_bytes - before;
    const uint64_t counted = model->activation_bytes(rows, logit_rows);
    EXPECT_GE(taken, counted) << rows;
    EXPECT_LT(taken, counted + 9 * 256) << rows;
  }
  const PoolStats before = backend->pool().stats();
  model->reserve(8, 8);
  EXPECT_EQ(backend->pool().stats().requests, before.requests);
}

TEST(Decoder, DecodeLoopAllocatesNothing) {
  auto backend = make_backend(BackendKind::cpu);
  auto model = load_model("preset:tiny", *backend, {});
  DecoderOptions options;
  options.n_seqs = 4;
  options.n_ctx = 64;
  Decoder decoder(*model, options);
  decoder.prefill({{1, 2, 3}, {1, 4}, {1}, {1, 5, 6, 7}});
  std::vector<int32_t> next;
  decoder.argmax(&next);
  decoder.decode(next);
  decoder.argmax(&next);
  const PoolStats before = backend->pool().stats();
  for (int step = 0; step < 40; ++step) {
    decoder.decode(next);
    decoder.argmax(&next);
    decoder.fetch_logits();
  }
  const PoolStats after = backend->pool().stats();
  EXPECT_EQ(after.upstream_allocs, before.upstream_allocs);
  EXPECT_EQ(after.requests, before.requests) << "the decode loop asked the pool for memory";
  EXPECT_EQ(decoder.position(0), 3 + 1 + 40);
  EXPECT_EQ(decoder.position(3), 4 + 1 + 40);
}

TEST(Decoder, DifferentPromptLengthsMatchSeparateRuns) {
  auto backend = make_backend(BackendKind::cpu);
  auto model = load_model("preset:tiny", *backend, {});
  std::vector<std::vector<int32_t>> prompts = {{1, 17, 99, 3}, {1}, {1, 250, 251}};
  GenerateOptions gen;
  gen.n_new = 30;
  gen.temperature = 0.0f;
  DecoderOptions together;
  together.n_seqs = 3;
  together.n_ctx = 64;
  Decoder batch(*model, together);
  GenerateResult all = batch.generate(prompts, gen);
  for (size_t s = 0; s < prompts.size(); ++s) {
    DecoderOptions alone;
    alone.n_ctx = 64;
    Decoder single(*model, alone);
    GenerateResult one = single.generate({prompts[s]}, gen);
    EXPECT_EQ(one.tokens[0], all.tokens[s]) << "sequence " << s;
  }
}

TEST(Decoder, ChunkedPrefillEqualsOnePass) {
  auto backend = make_backend(BackendKind::cpu);
  auto model = load_model("preset:tiny", *backend, {});
  std::vector<int32_t> prompt = {1};
  for (int i = 0; i < 50; ++i) prompt.push_back(10 + (i * 37) % 400);
  GenerateOptions gen;
  gen.n_new = 20;
  gen.temperature = 0.0f;
  DecoderOptions one_pass, chunked;
  one_pass.n_seqs = chunked.n_seqs = 2;
  one_pass.n_ctx = chunked.n_ctx = 80;
  chunked.pass_rows = 7;  // chunks that cut through sequences
  auto a = Decoder(*model, one_pass).generate({prompt, prompt}, gen);
  auto b = Decoder(*model, chunked).generate({prompt, prompt}, gen);
  EXPECT_EQ(a.tokens, b.tokens);
}

TEST(Decoder, BadRequestsAreRefused) {
  auto backend = make_backend(BackendKind::cpu);
  auto model = load_model("preset:tiny", *backend, {});
  DecoderOptions options;
  options.n_ctx = 16;
  Decoder decoder(*model, options);
  GenerateOptions gen;
  gen.n_new = 16;
  EXPECT_THROW(decoder.generate({{1, 2}}, gen), Error);  // 17 positions > 16
  EXPECT_THROW(decoder.prefill({{1, 512}}), Error);      // id outside the vocabulary
  EXPECT_THROW(decoder.prefill({{}}), Error);
  options.n_ctx = 100000;
  EXPECT_THROW(Decoder(*model, options), Error);  // longer than the model's context
  CliResult r = run_cli({"generate", "-m", "preset:nonesuch"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown preset"), std::string::npos) << r.err;
  r = run_cli({"generate", "-m", "preset:tiny", "--device", "cuda"});
  std::string reason;
  if (cuda_device_count(&reason) == 0) {
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("no CUDA device: "), std::string::npos) << r.err;
  }
  r = run_cli({"generate", "-m", "preset:tiny", "--batch", "0"});
  EXPECT_EQ(r.exit_code, 1);
  r = run_cli({"generate", "-m", "preset:tiny", "--temp", "-1"});
  EXPECT_EQ(r.exit_code, 1);
}

TEST(Decoder, SevenBillionOnTheCpuIsRefusedUpFront) {
  const uint64_t needed = LlamaModel::weight_bytes(find_preset("llama-7b").config, DType::f32);
  size_t free_bytes = 0, total = 0;
  HostUpstream host;
  ASSERT_TRUE(host.memory_info(&free_bytes, &total));
  if (free_bytes >= needed) GTEST_SKIP() << "skipped: this machine has room for a 7B f32 model";
  CliResult r = run_cli({"generate", "-m", "preset:llama-7b", "--device", "cpu", "-n", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("needs " + std::to_string(needed) + " bytes"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" are free on cpu"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace minfer::test
