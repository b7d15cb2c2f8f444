// The sampling flags of `minfer generate` and `minfer chat` (cli/cli_sampling.h): each refused one
// past its limit with one line naming it, before the model loads, and --logit-bias in llama.cpp's
// ID+BIAS and ID-BIAS forms. That they reach the sampler: test_serve_sampling.cpp, which compares
// generate's tokens with a server's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/test_support.h"

namespace minfer::test {
namespace {

TEST(CliSampling, EachFlagPastItsLimitIsRefusedNamingIt) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--top-k", "-1"}, "--top-k: -1 is outside [0, "},
      {{"--min-p", "1.0001"}, "--min-p: 1.0001 is outside [0, 1]"},
      {{"--min-p", "-0.0001"}, "--min-p: -0.0001 is outside [0, 1]"},
      {{"--presence-penalty", "2.0001"}, "--presence-penalty: 2.0001 is outside [-2, 2]"},
      {{"--frequency-penalty", "-2.0001"}, "--frequency-penalty: -2.0001 is outside [-2, 2]"},
      {{"--repeat-penalty", "0"}, "--repeat-penalty: 0 is outside (0, 1e6]"},
      {{"--logit-bias", "15"}, "--logit-bias: '15' is not ID+BIAS or ID-BIAS"},
      {{"--logit-bias", "15+100.5"}, "--logit-bias's bias: 100.5 is outside [-100, 100]"},
      {{"--logit-bias", "x+1"}, "--logit-bias's token id: 'x' is not an integer"},
      {{"--logit-bias", "600+1", "--temp", "0", "--prompt-ids", "1", "-n", "1"}, "token 600 is outside the vocabulary [0, 512)"},
      {{"--top-k", "2", "--draft", "ngram"}, "--draft samples with --temp and --top-p only"},
  };
  for (const char* command : {"generate", "chat"})
    for (const auto& [flags, message] : cases) {
      if (std::string(command) == "chat" && (flags.size() > 2)) continue;  // generate's own options
      std::vector<std::string> args = {command, "-m", "preset:tiny"};
      args.insert(args.end(), flags.begin(), flags.end());
      CliResult r = run_cli(args);
      EXPECT_EQ(r.exit_code, 1) << command << " " << flags[0] << " " << flags[1];
      EXPECT_NE(r.err.find(message), std::string::npos) << command << ": " << r.err;
    }
}

// The limits themselves are taken, and a bias of +100 (ID+100) makes that token every token, -100
// (ID-100) keeps it out of a greedy answer that had it.
TEST(CliSampling, LimitsAreTakenAndTheBiasFormsWork) {
  auto ids = [](const std::vector<std::string>& flags) {
    std::vector<std::string> args = {"generate", "-m", "preset:tiny", "--prompt-ids", "1", "-n", "8", "--temp", "0",
                                     "--print-ids"};
    args.insert(args.end(), flags.begin(), flags.end());
    CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  EXPECT_EQ(ids({"--logit-bias", "77+100"}), "77,77,77,77,77,77,77,77\n");
  const std::string plain = ids({});
  const std::string first = plain.substr(0, plain.find(','));
  const std::string without = ids({"--logit-bias", first + "-100"});
  EXPECT_EQ((without + ",").find(first + ","), std::string::npos) << plain << " -> " << without;
  ids({"--top-k", "0", "--min-p", "1", "--presence-penalty", "-2", "--frequency-penalty", "2", "--repeat-penalty", "1e6"});
}

}  // namespace
}  // namespace minfer::test
