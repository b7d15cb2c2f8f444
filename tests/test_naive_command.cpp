// `minfer naive`, the one-page forward made runnable: the same ids as `generate --device ref` on
// a written model file (no golden file needed), and clear refusals.
#include <gtest/gtest.h>

#include "tests/test_support.h"

namespace minfer::test {
namespace {

class NaiveCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    CliResult r = run_cli({"make-model", "--dim", "48", "--hidden-dim", "80", "--layers", "2", "--heads", "6",
                           "--kv-heads", "2", "--vocab", "97", "--seq-len", "64", "-o", model_});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  ScratchDir dir_{"naive-command"};
  std::string model_ = dir_.file("model.bin");
};

TEST_F(NaiveCommand, SameIdsAsGenerateOnTheReferenceBackend) {
  for (const char* temp : {"0", "1.0"}) {
    std::vector<std::string> common = {"-m", model_, "--prompt-ids", "1,5,9,33,2,7", "-n", "40", "--temp", temp,
                                       "--seed", "11", "--ignore-eos", "--print-ids"};
    std::vector<std::string> naive = {"naive"}, generate = {"generate", "--device", "ref"};
    naive.insert(naive.end(), common.begin(), common.end());
    generate.insert(generate.end(), common.begin(), common.end());
    CliResult a = run_cli(naive), b = run_cli(generate);
    ASSERT_EQ(a.exit_code, 0) << a.err;
    ASSERT_EQ(b.exit_code, 0) << b.err;
    EXPECT_EQ(parse_ids(a.out).size(), 40u) << "--temp " << temp;
    EXPECT_EQ(parse_ids(a.out), parse_ids(b.out)) << "--temp " << temp;
  }
}

TEST_F(NaiveCommand, RefusesPresetsAndBadInput) {
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {{"naive", "-m", "preset:stories15M"}, "presets are generated on a backend"},
           {{"naive", "-m", model_, "--prompt-ids", "97"}, "97 is outside [0, 96]"},
           {{"naive", "-m", model_, "--prompt-ids", "1", "-n", "65"}, "context"},
           {{"naive", "-m", model_, "-i", "hello"}, "needs a tokenizer"},
           {{"naive"}, "-m MODEL is required"}}) {
    CliResult r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args.back();
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace minfer::test
