// Malformed checkpoints: every one is refused with one clear line naming the file and a non-zero
// exit; none crashes, hangs, allocates its announced size, or is accepted. The corpus is made
// from a valid file written by `minfer make-model`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "formats/checkpoint.h"
#include "tests/test_support.h"

namespace minfer::test {
namespace {

struct Broken {
  std::string name;
  std::string bytes;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string with_i32(std::string bytes, size_t offset, int32_t value) {
  std::memcpy(bytes.data() + offset, &value, 4);
  return bytes;
}

// A v0 header of the given fields followed by `floats` zero floats.
std::string v0_file(std::vector<int32_t> fields, size_t floats) {
  std::string bytes(28 + floats * 4, '\0');
  std::memcpy(bytes.data(), fields.data(), 28);
  return bytes;
}

std::vector<Broken> broken_corpus(const std::string& v0, const std::string& v1) {
  std::vector<Broken> corpus;
  const char* fields[] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  corpus.push_back({"empty", ""});
  for (size_t n : {1, 4, 8, 12, 16, 20, 24, 27})
    corpus.push_back({"header cut at byte " + std::to_string(n), v0.substr(0, n)});
  for (int f = 0; f < 7; ++f) {
    corpus.push_back({std::string(fields[f]) + " = 0", with_i32(v0, 4 * f, 0)});
    corpus.push_back({std::string(fields[f]) + " = -5", with_i32(v0, 4 * f, -5)});
    corpus.push_back({std::string(fields[f]) + " = INT32_MAX", with_i32(v0, 4 * f, INT32_MAX)});
  }
  corpus.push_back({"vocab_size = INT32_MIN", with_i32(v0, 20, INT32_MIN)});
  // The valid file's shape is dim 16, hidden 24, 2 layers, 4 heads, 2 KV heads, vocab 32, seq 8.
  corpus.push_back({"dim not a multiple of n_heads", with_i32(v0, 0, 18)});
  corpus.push_back({"odd head size", with_i32(v0, 0, 12)});
  corpus.push_back({"n_heads not a multiple of n_kv_heads", with_i32(v0, 16, 3)});
  corpus.push_back({"more KV heads than heads", with_i32(v0, 16, 8)});
  corpus.push_back({"body one float short", v0.substr(0, v0.size() - 4)});
  corpus.push_back({"body one byte short", v0.substr(0, v0.size() - 1)});
  corpus.push_back({"body one float long", v0 + std::string(4, '\0')});
  corpus.push_back({"body twice", v0 + v0.substr(28)});
  corpus.push_back({"header only", v0.substr(0, 28)});
  corpus.push_back({"huge shape, tiny file", v0_file({65536, 262144, 1024, 1024, 1024, 4194304, 1048576}, 16)});
  corpus.push_back({"v1 magic off by one", with_i32(v1, 0, 0x616b3433)});
  corpus.push_back({"v1 version 2", with_i32(v1, 4, 2)});
  corpus.push_back({"v1 version 0", with_i32(v1, 4, 0)});
  std::string flag = v1;
  flag[36] = 7;
  corpus.push_back({"v1 shared_classifier = 7", flag});
  corpus.push_back({"v1 header cut at 100 bytes", v1.substr(0, 100)});
  corpus.push_back({"v1 body one float short", v1.substr(0, v1.size() - 4)});
  corpus.push_back({"v1 dim = 0", with_i32(v1, 8, 0)});
  std::mt19937 rng(99);
  for (size_t n : {28, 1000, 100000}) {
    std::string noise(n, '\0');
    for (auto& c : noise) c = static_cast<char>(rng());
    corpus.push_back({"random bytes " + std::to_string(n), noise});
  }
  return corpus;
}

class Checkpoints : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* format : {"v0", "v1"}) {
      std::string path = dir_.file(std::string("valid-") + format + ".bin");
      CliResult r = run_cli({"make-model", "--dim", "16", "--hidden-dim", "24", "--layers", "2", "--heads", "4",
                             "--kv-heads", "2", "--vocab", "32", "--seq-len", "8", "--format", format, "-o", path});
      ASSERT_EQ(r.exit_code, 0) << r.err;
      (std::string(format) == "v0" ? v0_ : v1_) = read_file(path);
    }
  }
  ScratchDir dir_{"checkpoints"};
  std::string v0_, v1_;
};

TEST_F(Checkpoints, ValidFilesLoad) {
  for (const char* format : {"v0", "v1"}) {
    std::string path = dir_.file(std::string("valid-") + format + ".bin");
    LlamaHostWeights w = load_checkpoint(path);
    EXPECT_EQ(w.config.dim, 16);
    EXPECT_EQ(w.config.n_kv_heads, 2);
    CliResult r = run_cli({"generate", "-m", path, "-n", "4", "--temp", "0", "--print-ids", "--device", "cpu",
                           "--ignore-eos"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(parse_ids(r.out).size(), 4u);
  }
}

TEST_F(Checkpoints, EveryBrokenFileIsRefusedWithOneLine) {
  std::vector<Broken> corpus = broken_corpus(v0_, v1_);
  std::vector<std::pair<std::string, std::string>> cases;  // (name, path)
  for (size_t i = 0; i < corpus.size(); ++i) {
    std::string path = dir_.file("broken-" + std::to_string(i) + ".bin");
    write_bytes(path, corpus[i].bytes);
    cases.push_back({corpus[i].name, path});
  }
  std::string directory = dir_.file("a-directory.bin");
  std::filesystem::create_directories(directory);
  cases.push_back({"a directory", directory});
  cases.push_back({"no such file", dir_.file("missing.bin")});
  ASSERT_GE(cases.size(), 40u);
  for (const auto& [name, path] : cases) {
    EXPECT_THROW(load_checkpoint(path), Error) << name;
    CliResult r = run_cli({"generate", "-m", path, "-n", "2", "--device", "cpu"});
    EXPECT_EQ(r.exit_code, 1) << name << ": " << r.err;
    EXPECT_EQ(r.err.rfind("minfer: error: " + path + ": ", 0), 0u) << name << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << name << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << name;
  }
}

TEST_F(Checkpoints, MessagesNameTheFieldValueAndLimit) {
  std::string path = dir_.file("zero-layers.bin");
  write_bytes(path, with_i32(v0_, 8, 0));
  CliResult r = run_cli({"generate", "-m", path, "--device", "cpu"});
  EXPECT_NE(r.err.find("n_layers = 0, must be in [1, 1024]"), std::string::npos) << r.err;
  write_bytes(path, v0_.substr(0, v0_.size() - 4));
  r = run_cli({"generate", "-m", path, "--device", "cpu"});
  EXPECT_NE(r.err.find("bytes but its header"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("implies " + std::to_string(v0_.size()) + " bytes"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace minfer::test
