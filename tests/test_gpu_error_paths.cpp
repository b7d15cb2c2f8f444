// The error paths of the CUDA backend, driven on the host: the decoder and the KV cache run on a
// backend that fails on demand and records work as CUDA Graphs do (tests/fault_backend.h), so a
// sticky device error, a recorded step replayed after its block table changed, a capture thrown
// away, a -1 in a block table, the host memory kept after loading and a misaligned streaming read
// are each tested without a GPU. The pool's and the recordings' own error paths are in
// tests/test_pool.cpp and tests/test_recordings.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/decoder.h"
#include "engine/kv_cache.h"
#include "formats/model_files.h"
#include "model/llama.h"
#include "model/presets.h"
#include "tests/fake_upstream.h"
#include "tests/fault_backend.h"
#include "tests/random_llama.h"

namespace minfer::test {
namespace {

std::unique_ptr<FaultBackend> fault_backend(BackendKind kind, std::unique_ptr<CachingPool> host_pool = nullptr) {
  return std::make_unique<FaultBackend>(make_backend(kind), std::move(host_pool));
}

// A paged decoder of one sequence over preset:tiny (5 layers): 4 blocks of 16 positions, every
// table entry -1 until set_blocks.
DecoderOptions paged_options() {
  DecoderOptions o;
  o.n_ctx = 64;
  o.kv_blocks = 4;
  o.kv_block_size = 16;
  return o;
}

int32_t device_table_entry(const Decoder& decoder, int64_t j) {
  return decoder.cache().block_table().data_as<int32_t>()[j];  // ref and cpu tables are host memory
}

bool one_line(const std::string& text) {
  return !text.empty() && std::count(text.begin(), text.end(), '\n') == (text.back() == '\n' ? 1 : 0);
}

// After a sticky device error every synchronize() throws. ~Decoder synchronizes: it must report
// the error on one line of stderr and go on, for a throwing destructor is std::terminate (one
// faulting test would end the whole CUDA run, a server would abort).
TEST(GpuErrorPaths, ADecoderDestroyedAfterADeviceErrorReportsItAndGoesOn) {
  auto backend = fault_backend(BackendKind::ref);
  auto model = load_model("preset:tiny", *backend, {});
  DecoderOptions options;
  options.n_ctx = 16;
  auto decoder = std::make_unique<Decoder>(*model, options);
  decoder->prefill({{1, 2}});
  backend->fail_synchronize = true;
  EXPECT_THROW(decoder->decode({3}), Error) << "the next step meets the error";
  testing::internal::CaptureStderr();
  decoder.reset();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(one_line(err)) << err;
  EXPECT_NE(err.find("minfer: warning: a decoder was destroyed after a device error: "), std::string::npos) << err;
  EXPECT_NE(err.find("an illegal memory access was encountered"), std::string::npos) << err;
  backend->fail_synchronize = false;
}

// A decode step runs plainly, is captured the second time and replayed from then on. A table set
// after the capture (copy on write moves the sequence to another block) must reach the device
// before the replay, or the step writes and reads the old block.
TEST(GpuErrorPaths, ARecordedDecodeStepSeesATableSetAfterTheCapture) {
  auto backend = fault_backend(BackendKind::ref);
  auto model = load_model("preset:tiny", *backend, {});
  Decoder decoder(*model, paged_options());
  const int32_t first[] = {0};
  decoder.set_blocks(0, first, 1, 0);
  for (int32_t token : {1, 2, 3}) decoder.decode({token});  // plain, captured, replayed
  ASSERT_EQ(backend->recordings().captures(), 1u);
  EXPECT_EQ(device_table_entry(decoder, 0), 0);
  decoder.copy_block(2, 0);
  const int32_t moved[] = {2};
  decoder.set_blocks(0, moved, 1, 3);
  decoder.decode({4});  // replayed
  EXPECT_EQ(backend->recordings().captures(), 1u) << "the step was replayed, not captured again";
  EXPECT_EQ(device_table_entry(decoder, 0), 2) << "the replay ran with the table of the capture";
}

// A capture that fails after recording (a graph that does not instantiate) is thrown away with the
// copy it recorded: the table's change must not be forgotten with it.
TEST(GpuErrorPaths, ACaptureThrownAwayDoesNotForgetAChangedTable) {
  auto backend = fault_backend(BackendKind::ref);
  auto model = load_model("preset:tiny", *backend, {});
  Decoder decoder(*model, paged_options());
  const int32_t first[] = {0};
  decoder.set_blocks(0, first, 1, 0);
  decoder.decode({1});  // plain
  decoder.copy_block(1, 0);
  const int32_t moved[] = {1};
  decoder.set_blocks(0, moved, 1, 1);
  backend->fail_next_capture = true;
  EXPECT_THROW(decoder.decode({2}), Error);
  EXPECT_EQ(decoder.position(0), 1) << "a failed step does not advance";
  decoder.decode({2});  // captured again, then launched
  EXPECT_EQ(backend->recordings().captures(), 1u);
  EXPECT_EQ(device_table_entry(decoder, 0), 1);
}

// The rows of a pass are checked against the host's block table before any op runs, on every
// backend (CUDA's kernels do not check: there a -1 in layer l > 0 writes into layer l - 1's last
// block). At the limit a pass runs; one position further, or a -1 among the blocks attention
// reads, is refused with one line, nothing run and the sequence where it was.
TEST(GpuErrorPaths, ATableHoleIsRefusedBeforeAnyOpRuns) {
  for (BackendKind kind : {BackendKind::ref, BackendKind::cpu}) {
    SCOPED_TRACE(backend_kind_name(kind));
    auto backend = fault_backend(kind);
    auto model = load_model("preset:tiny", *backend, {});
    Decoder decoder(*model, paged_options());
    auto refused = [&](const std::function<void()>& pass, const std::string& expected) {
      const int64_t calls = backend->calls(), position = decoder.position(0);
      try {
        pass();
        ADD_FAILURE() << "expected: " << expected;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
        EXPECT_TRUE(one_line(e.what())) << e.what();
      }
      EXPECT_EQ(backend->calls(), calls) << "ops ran before the refusal";
      EXPECT_EQ(decoder.position(0), position);
    };
    const int32_t hole_at_end[] = {0, 1, -1};
    decoder.set_blocks(0, hole_at_end, 3, 31);
    decoder.decode({5});  // position 31, the last of block 1: runs
    EXPECT_EQ(decoder.position(0), 32);
    refused([&] { decoder.decode({6}); }, "forward pass: row 0's position 32 is in block -1 of a pool of 4");
    const int32_t token = 6;
    refused([&] { decoder.forward_chunks({{0, &token, 1, true}}); }, "position 32 is in block -1");
    const int32_t chunk[] = {7, 8, 9};  // positions 30 and 31 in block 1, then 32 in the hole
    decoder.set_blocks(0, hole_at_end, 3, 30);
    refused([&] { decoder.forward_chunks({{0, chunk, 3, true}}); }, "row 2's position 32 is in block -1");
    const int32_t hole_before[] = {0, -1, 2};
    decoder.set_blocks(0, hole_before, 3, 40);
    refused([&] { decoder.decode({6}); }, "position 16 is in block -1");  // a key attention reads
  }
}

// The check itself, on the host's table: a row's sequence and position must be in the table, at
// the last position (exactly the limit) and not one past it.
TEST(GpuErrorPaths, KvCacheRowsOutsideTheTableAreRefused) {
  auto backend = make_backend(BackendKind::ref);
  KvCache cache(*backend, 2, 2, 32, 1, 4, DType::f32, 16);  // 2 sequences of 2 blocks of 16
  const int32_t seq[] = {0, 1}, last[] = {31, 31}, past[] = {0, 32}, negative[] = {-1, 0}, bad_seq[] = {0, 2};
  EXPECT_NO_THROW(cache.check_rows("t", seq, last, 2));
  EXPECT_THROW(cache.check_rows("t", seq, past, 2), Error);
  EXPECT_THROW(cache.check_rows("t", seq, negative, 2), Error);
  EXPECT_THROW(cache.check_rows("t", bad_seq, last, 2), Error);
}

// Loading converts f32 weights to f16 through host staging buffers (pinned memory on CUDA, as
// large as the largest matrix in f32); once loaded, no host memory stays cached for them.
TEST(GpuErrorPaths, LoadingGivesItsHostStagingMemoryBack) {
  FakeUpstream::Counters held;
  auto backend = fault_backend(BackendKind::ref, std::make_unique<CachingPool>(fake(&held)));
  const LlamaHostWeights weights = random_llama_weights(find_preset("tiny").config, 3, 2.0);
  LlamaOptions options;
  options.dtype = DType::f16;
  auto model = std::make_unique<LlamaModel>(*backend, weights, "tiny", options);
  EXPECT_GT(held.allocs, 0) << "the conversions used no host staging: the test tests nothing";
  EXPECT_EQ(held.live_bytes, 0u) << "host bytes still held after loading";
}

// CUDA's sum reads x as float4: every backend refuses an x that does not start on 16 bytes, and
// takes one that starts exactly on the next boundary.
TEST(GpuErrorPaths, SumRefusesAnUnalignedStart) {
  for (BackendKind kind : {BackendKind::ref, BackendKind::cpu}) {
    auto backend = make_backend(kind);
    Tensor x = backend->empty({1001}, DType::f32);
    backend->fill_uniform(x, 1, 0.0f, 1.0f);
    Tensor out = backend->empty({1}, DType::f32);
    for (int64_t offset : {1, 2, 3}) {
      try {
        backend->sum(out, x.slice(0, offset, 1001));
        ADD_FAILURE() << backend_kind_name(kind) << " offset " << offset;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("16-byte"), std::string::npos) << e.what();
      }
    }
    EXPECT_NO_THROW(backend->sum(out, x.slice(0, 4, 1001))) << backend_kind_name(kind);
  }
}

}  // namespace
}  // namespace minfer::test
