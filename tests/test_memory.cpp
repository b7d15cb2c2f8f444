// Memory: a model is loaded with about one copy of its weights resident, whatever its format
// (file pages are dropped as each tensor is copied to the backend), and a CPU process never maps
// the CUDA math libraries (core/cublas_loader.cpp loads them on a GPU's first product only).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/backend.h"
#include "model/llama.h"
#include "tests/test_support.h"
#include "formats/model_files.h"

namespace minfer::test {
namespace {

uint64_t size_of(const std::string& path) {
  if (std::filesystem::is_directory(path)) {
    uint64_t total = 0;
    for (const auto& e : std::filesystem::directory_iterator(path)) total += e.file_size();
    return total;
  }
  return std::filesystem::file_size(path);
}

// stories42M's shape (168 MB in f32, 84 MB in bf16) in each format: what `minfer generate` holds
// on the CPU beyond the same command on a 1 MB model (the binary, its libraries and the heap: 12.7 MB
// here) stays below 1.1 times the file: one copy of the weights, not two. Measured 1.03 to 1.04 times
// on Zen 4, and 2.0 times with the file's pages kept. The whole peak, 1.10 to 1.19 times the file
// here, once passed 1.2 on CI's machine, though the weights' share had not changed.
TEST(Memory, GeneratePeaksBelowOnePointOneTimesTheModelFileBeyondAFixedCost) {
  if (kSanitized) GTEST_SKIP() << "skipped: AddressSanitizer's shadow memory changes the resident size";
  CliResult base = run_cli({"generate", "-m", "preset:tiny", "--device", "cpu", "-n", "4", "--temp", "0", "--print-ids"});
  ASSERT_EQ(base.exit_code, 0) << base.err;
  const double fixed = double(base.max_rss_bytes);
  ScratchDir dir("memory");
  const std::vector<std::vector<std::string>> models = {
      {"hf", "bf16", dir.file("hf")}, {"gguf", "bf16", dir.file("m.gguf")}, {"v0", "f32", dir.file("m.bin")}};
  for (const auto& m : models) {
    std::vector<std::string> args = {"make-model", "--preset", "stories42M", "--format", m[0], "-o", m[2]};
    if (m[0] != "v0") args.insert(args.end(), {"--dtype", m[1]});
    CliResult made = run_cli(args);
    ASSERT_EQ(made.exit_code, 0) << made.err;
    CliResult run = run_cli({"generate", "-m", m[2], "--device", "cpu", "-n", "4", "--temp", "0", "--print-ids"});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const double file = double(size_of(m[2]));
    const double ratio = (double(run.max_rss_bytes) - fixed) / file;
    std::printf("%s %s: file %.1f MB, peak resident %.1f MB, beyond the 1 MB model's %.1f MB: %.3fx the file\n",
                m[0].c_str(), m[1].c_str(), file / 1e6, run.max_rss_bytes / 1e6, fixed / 1e6, ratio);
    EXPECT_LT(ratio, 1.1) << m[0] << " " << m[1];
  }
}

// A CPU run leaves libcublas and libcublasLt unmapped (they cost about 200 MB resident linked).
TEST(Memory, CpuRunsDoNotLoadTheCudaMathLibraries) {
  auto backend = make_backend(BackendKind::cpu);
  auto model = load_model("preset:tiny", *backend, LlamaOptions{});
  std::ifstream maps("/proc/self/maps");
  ASSERT_TRUE(maps) << "no /proc/self/maps";
  std::string line;
  while (std::getline(maps, line)) EXPECT_EQ(line.find("libcublas"), std::string::npos) << line;
  CliResult run = run_cli({"generate", "-m", "preset:tiny", "--device", "cpu", "-n", "4", "--print-ids"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  if (!kSanitized) {
    EXPECT_LT(run.max_rss_bytes, uint64_t(64) << 20) << "a 1 MB model";
  }
}

}  // namespace
}  // namespace minfer::test
