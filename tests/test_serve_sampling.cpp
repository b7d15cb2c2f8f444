// The sampler's request fields past temperature and top_p (top_k, min_p, presence_penalty,
// frequency_penalty, repetition_penalty, logit_bias): each parsed on both routes, taken at its limits
// and refused one past them with a 400 naming it; and through a real server, where they give the
// tokens `minfer generate` gives with llama.cpp's flags of the same names.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "serve/serve_api.h"
#include "tests/serve_http_support.h"

namespace minfer::test {
namespace {

using serve::ApiError;
using serve::CompletionRequest;

constexpr int64_t kVocab = 100;
const serve::ApiLimits kLimits{50, 20};

// The request with `fields` added, parsed on the completions route or the chat route.
CompletionRequest parse_with(const nlohmann::json& fields, bool chat) {
  nlohmann::json body = fields;
  if (chat) body["messages"] = {{{"role", "user"}, {"content", "hi"}}};
  else body["prompt"] = {1, 2};
  return chat ? serve::parse_chat_request(body.dump(), kLimits)
              : serve::parse_completion_request(body.dump(), kVocab, true, kLimits);
}

// The 400 that `fields` get, on either route.
ApiError refusal_with(const nlohmann::json& fields, bool chat) {
  try {
    CompletionRequest r = parse_with(fields, chat);
    serve::check_logit_bias(r, kVocab);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << fields.dump();
  return {};
}

TEST(ServeSamplingParse, EachFieldAtItsLimitsOnBothRoutes) {
  for (bool chat : {false, true}) {
    CompletionRequest r = parse_with({{"top_k", 40}, {"min_p", 1.0}, {"presence_penalty", -2.0},
                                      {"frequency_penalty", 2.0}, {"repetition_penalty", 1e6},
                                      {"logit_bias", {{"0", -100}, {"99", 100}}}},
                                     chat);
    EXPECT_EQ(r.sampling.top_k, 40);
    EXPECT_FLOAT_EQ(r.sampling.min_p, 1.0f);
    EXPECT_FLOAT_EQ(r.sampling.presence_penalty, -2.0f);
    EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, 2.0f);
    EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1e6f);
    ASSERT_EQ(r.sampling.logit_bias.size(), 2u);
    EXPECT_EQ(r.sampling.logit_bias[0].token, 0);
    EXPECT_FLOAT_EQ(r.sampling.logit_bias[0].bias, -100.0f);
    EXPECT_EQ(r.sampling.logit_bias[1].token, 99);
    EXPECT_NO_THROW(serve::check_logit_bias(r, kVocab));
    // -1 (vLLM's) and 0 keep every token; nulls and the defaults ask for nothing.
    EXPECT_EQ(parse_with({{"top_k", -1}}, chat).sampling.top_k, 0);
    const CompletionRequest defaults = parse_with({{"top_k", nullptr}, {"min_p", 0}, {"logit_bias", nlohmann::json::object()},
                                                   {"presence_penalty", nullptr}, {"repetition_penalty", 1}},
                                                  chat);
    EXPECT_FALSE(defaults.sampling.cuts() || defaults.sampling.processes_logits());
  }
}

TEST(ServeSamplingParse, OnePastEachLimitIsRefusedNamingTheField) {
  struct Case {
    nlohmann::json fields;
    std::string param, fragment;
  };
  nlohmann::json too_many = nlohmann::json::object();
  for (int i = 0; i < 301; ++i) too_many[std::to_string(i)] = 1;
  const std::vector<Case> cases = {
      {{{"top_k", -2}}, "top_k", "at least -1"},
      {{{"top_k", 1.5}}, "top_k", "must be an integer"},
      {{{"min_p", -0.0001}}, "min_p", "outside [0, 1]"},
      {{{"min_p", 1.0001}}, "min_p", "outside [0, 1]"},
      {{{"presence_penalty", 2.0001}}, "presence_penalty", "outside [-2, 2]"},
      {{{"presence_penalty", -2.0001}}, "presence_penalty", "outside [-2, 2]"},
      {{{"frequency_penalty", 2.0001}}, "frequency_penalty", "outside [-2, 2]"},
      {{{"frequency_penalty", "1"}}, "frequency_penalty", "must be a number"},
      {{{"repetition_penalty", 0}}, "repetition_penalty", "outside (0, 1e6]"},
      {{{"repetition_penalty", 1e-300}}, "repetition_penalty", "as a 32-bit float"},
      {{{"logit_bias", {{"5", 100.0001}}}}, "logit_bias[\"5\"]", "outside [-100, 100]"},
      {{{"logit_bias", {{"5", -100.0001}}}}, "logit_bias[\"5\"]", "outside [-100, 100]"},
      {{{"logit_bias", {{"100", 1}}}}, "logit_bias", "token 100 is outside the vocabulary [0, 100)"},
      {{{"logit_bias", {{"-1", 1}}}}, "logit_bias", "'-1' is not a token id"},
      {{{"logit_bias", {{"7x", 1}}}}, "logit_bias", "'7x' is not a token id"},
      {{{"logit_bias", {{"", 1}}}}, "logit_bias", "'' is not a token id"},
      {{{"logit_bias", {{"99999999999", 1}}}}, "logit_bias", "is not a token id"},
      {{{"logit_bias", {1, 2}}}, "logit_bias", "must be an object"},
      {{{"logit_bias", too_many}}, "logit_bias", "has 301 entries; at most 300"},
  };
  for (bool chat : {false, true})
    for (const Case& c : cases) {
      const ApiError e = refusal_with(c.fields, chat);
      EXPECT_EQ(e.status, 400) << c.fields.dump();
      EXPECT_EQ(e.param, c.param) << c.fields.dump();
      EXPECT_NE(e.message.find(c.fragment), std::string::npos) << c.fields.dump() << ": " << e.message;
    }
  // 300 entries are taken.
  too_many.erase("300");
  EXPECT_EQ(parse_with({{"logit_bias", too_many}}, false).sampling.logit_bias.size(), 300u);
}

#if MINFER_HAVE_HTTPLIB

class ServeSampling : public SharedServer<ServeSampling> {
 public:
  static std::vector<std::string> server_args() { return {"-m", kTextModel, "--slots", "2", "--ctx", "128"}; }
};

const std::vector<int32_t> kPrompt = {1, 450, 600};

json completion(const json& fields, int max_tokens) {
  json body = fields;
  body["prompt"] = kPrompt;
  body["max_tokens"] = max_tokens;
  return body;
}

// What `minfer generate` prints for kPrompt with these flags.
std::vector<int32_t> generated(const std::vector<std::string>& flags, int64_t n) {
  std::vector<std::string> args = {"generate", "-m", kTextModel, "-n", std::to_string(n), "--print-ids",
                                   "--prompt-ids", ids_text(kPrompt)};
  args.insert(args.end(), flags.begin(), flags.end());
  CliResult r = run_cli(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<int32_t> ids;
  for (int64_t v : json::parse("[" + r.out + "]")) ids.push_back(static_cast<int32_t>(v));
  return ids;
}

// A bias of +100 on one token makes it every token, greedy or sampled; the server's penalties and
// cuts give the tokens `minfer generate` gives with the same settings and seed, and the penalties
// change the greedy answer.
TEST_F(ServeSampling, FieldsGiveTheTokensOfGenerateWithTheSameFlags) {
  for (double temperature : {0.0, 1.0}) {
    Answer a = post(port(), completion({{"temperature", temperature}, {"logit_bias", {{"700", 100}}}}, 6).dump());
    ASSERT_EQ(a.status, 200) << a.raw;
    EXPECT_EQ(ids_of(a.body["choices"][0]["token_ids"]), std::vector<int32_t>(6, 700)) << temperature;
  }
  const std::vector<int32_t> plain = generated({"--temp", "0"}, 16);
  struct Case {
    json fields;
    std::vector<std::string> flags;
  };
  const std::vector<Case> cases = {
      {{{"temperature", 0}, {"frequency_penalty", 2}}, {"--temp", "0", "--frequency-penalty", "2"}},
      {{{"temperature", 0}, {"presence_penalty", 2}}, {"--temp", "0", "--presence-penalty", "2"}},
      {{{"temperature", 0}, {"repetition_penalty", 1.8}}, {"--temp", "0", "--repeat-penalty", "1.8"}},
      {{{"temperature", 0.9}, {"top_k", 3}, {"seed", 5}}, {"--temp", "0.9", "--top-p", "1", "--top-k", "3", "--seed", "5"}},
      {{{"temperature", 0.9}, {"min_p", 0.2}, {"top_p", 0.9}, {"seed", 6}},
       {"--temp", "0.9", "--top-p", "0.9", "--min-p", "0.2", "--seed", "6"}},
      {{{"temperature", 0}, {"logit_bias", {{std::to_string(plain[0]), -100}}}},
       {"--temp", "0", "--logit-bias", std::to_string(plain[0]) + "-100"}},
  };
  for (const Case& c : cases) {
    Answer a = post(port(), completion(c.fields, 16).dump());
    ASSERT_EQ(a.status, 200) << a.raw;
    const std::vector<int32_t> served = ids_of(a.body["choices"][0]["token_ids"]);
    EXPECT_EQ(served, generated(c.flags, 16)) << c.fields.dump();
    if (c.fields["temperature"] == 0) {
      EXPECT_NE(served, plain) << c.fields.dump() << " changed nothing";
    }
  }
}

TEST_F(ServeSampling, RefusalsOverHttpNameTheFieldAndTheServerGoesOn) {
  expect_api_error(post(port(), completion({{"logit_bias", {{"1003", 1}}}}, 2).dump()), 400,
                   "token 1003 is outside the vocabulary [0, 1003)");
  expect_api_error(post(port(), completion({{"top_k", -2}}, 2).dump()), 400, "top_k");
  Answer ok = post(port(), completion({{"logit_bias", {{"1002", 1}}}, {"temperature", 0}}, 2).dump());
  EXPECT_EQ(ok.status, 200) << ok.raw;
}

#endif  // MINFER_HAVE_HTTPLIB

}  // namespace
}  // namespace minfer::test
