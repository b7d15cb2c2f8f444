// The completions API without sockets (serve/serve_api.h): what a request may say, how each
// mistake is refused (status, field, one line), seeds, stop strings, and the error object.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "serve/serve_api.h"

namespace minfer::test {
namespace {

using serve::ApiError;
using serve::ApiLimits;
using serve::CompletionRequest;

constexpr int64_t kVocab = 100;
const ApiLimits kLimits{50, 20};

CompletionRequest parse(const std::string& body, bool has_tokenizer = true) {
  return serve::parse_completion_request(body, kVocab, has_tokenizer, kLimits);
}

// The ApiError `body` is refused with; fails the test when it is accepted.
ApiError refusal(const std::string& body, bool has_tokenizer = true) {
  try {
    parse(body, has_tokenizer);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return {};
}

TEST(ServeApiParse, ReadsEveryImplementedField) {
  CompletionRequest r = parse(R"({"model": "m", "prompt": [1, 5, 99], "max_tokens": 7, "temperature": 0.5,
      "top_p": 0.25, "seed": 42, "stop": ["a", "bc"], "stream": true, "stream_options": {"include_usage": true},
      "ignore_eos": true, "user": "anyone", "n": 1, "echo": false, "logprobs": null, "logit_bias": {}})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 5, 99}));
  EXPECT_FALSE(r.text);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.top_p, 0.25f);
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(r.stream && r.include_usage && r.ignore_eos);
  CompletionRequest text = parse(R"({"prompt": "Once upon a time"})");
  EXPECT_EQ(text.text, "Once upon a time");
  EXPECT_EQ(text.max_tokens, 16);  // OpenAI's default
  EXPECT_FALSE(text.seed);
}

TEST(ServeApiParse, RefusesEachMistakeNamingItsField) {
  struct Case {
    std::string body;
    std::string param;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"prompt": [1], )", "", "malformed JSON"},
           {R"([1, 2])", "", "must be a JSON object"},
           {R"({"max_tokens": 3})", "prompt", "prompt is required"},
           {R"({"prompt": []})", "prompt", "no tokens"},
           {R"({"prompt": [1, 100]})", "prompt", "outside the vocabulary [0, 100)"},
           {R"({"prompt": [[1], [2]]})", "prompt", "a list of prompts is not supported"},
           {R"({"prompt": [1], "max_tokens": "8"})", "max_tokens", "must be"},
           {R"({"prompt": [1], "max_tokens": 0})", "max_tokens", "at least 1"},
           {R"({"prompt": [1], "max_tokens": 21})", "max_tokens", "over this server's limit of 20"},
           {R"({"prompt": [1], "temperature": -0.1})", "temperature", "outside [0, 1e6]"},
           {R"({"prompt": [1], "top_p": 0})", "top_p", "outside (0, 1]"},
           {R"({"prompt": [1], "seed": 1.5})", "seed", "a 64-bit integer"},
           {R"({"prompt": [1], "stop": ["a", "b", "c", "d", "e"]})", "stop", "at most 4"},
           {R"({"prompt": [1], "stop": [""]})", "stop", "must not be empty"},
           {R"({"prompt": [1], "n": 2})", "n", "not supported (only 1)"},
           {R"({"prompt": [1], "echo": true})", "echo", "not supported"},
           {R"({"prompt": [1], "presence_penalty": 0.5})", "presence_penalty", "not supported (only 0)"},
           {R"({"prompt": [1], "stream_options": {"include_usage": true}})", "stream_options", "only for streams"},
           {R"({"prompt": [1], "stream": true, "stream_options": {"x": 1}})", "stream_options", "unknown field 'x'"},
           {R"({"prompt": [1], "frobnicate": 1})", "frobnicate", "unknown field 'frobnicate'"}}) {
    ApiError e = refusal(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_NE(e.message.find(c.message), std::string::npos) << c.body << " -> " << e.message;
    EXPECT_EQ(e.message.find('\n'), std::string::npos) << e.message;
  }
}

TEST(ServeApiParse, WithoutATokenizerTextIsRefused) {
  EXPECT_NE(refusal(R"({"prompt": "hello"})", false).message.find("no tokenizer"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": [1], "stop": ["x"]})", false).message.find("no tokenizer"), std::string::npos);
  EXPECT_EQ(parse(R"({"prompt": [1, 2]})", false).prompt_ids.size(), 2u);
}

TEST(ServeApiParse, PromptLengthIsCheckedAgainstTheLimit) {
  EXPECT_NO_THROW(serve::check_prompt_length(50, kLimits));
  try {
    serve::check_prompt_length(51, kLimits);
    FAIL() << "a prompt over the limit was accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "prompt");
    EXPECT_NE(e.message.find("51 tokens is over this server's limit of 50"), std::string::npos) << e.message;
  }
}

// Any integer the API allows is a seed; 0 and negative ones map to non-zero xorshift states.
TEST(ServeApiSeed, EveryIntegerIsASeedAndNoneIsZero) {
  EXPECT_EQ(serve::sampler_seed(nlohmann::json(5)), 5u);
  EXPECT_EQ(serve::sampler_seed(nlohmann::json(0)), serve::kSeedZeroState);
  EXPECT_EQ(serve::sampler_seed(nlohmann::json(-1)), ~uint64_t(0));
  EXPECT_EQ(serve::sampler_seed(nlohmann::json(UINT64_MAX)), UINT64_MAX);
  EXPECT_EQ(parse(R"({"prompt": [1], "seed": 0})").seed, serve::kSeedZeroState);
}

TEST(ServeApiStop, FindsTheEarliestStopAndWhatCouldStillBecomeOne) {
  const std::vector<std::string> stops = {"END", "\n\n"};
  EXPECT_EQ(serve::find_stop("abc\n\nxEND", stops), 3u);
  EXPECT_EQ(serve::find_stop("abcEND\n\n", stops), 3u);
  EXPECT_EQ(serve::find_stop("abc", stops), std::string::npos);
  EXPECT_EQ(serve::stop_prefix_at_end("abcEN", stops), 2u);
  EXPECT_EQ(serve::stop_prefix_at_end("abc\n", stops), 1u);
  EXPECT_EQ(serve::stop_prefix_at_end("abcx", stops), 0u);
}

// A stop string split across tokens is found when its last byte arrives, not before.
TEST(ServeApiStop, MatcherFindsStopsAcrossTokens) {
  serve::StopMatcher matcher({"<end>"}, 8);
  EXPECT_FALSE(matcher.push("hello <"));
  EXPECT_FALSE(matcher.push("en"));
  EXPECT_TRUE(matcher.push("d> more"));
  serve::StopMatcher none;
  EXPECT_TRUE(none.empty());
}

TEST(ServeApiErrors, TheErrorObjectIsOpenAIs) {
  const nlohmann::json body = nlohmann::json::parse(serve::error_body({429, "the queue is full", "", "queue_full"}));
  EXPECT_EQ(body["error"]["message"], "the queue is full");
  EXPECT_EQ(body["error"]["type"], "rate_limit_error");
  EXPECT_EQ(body["error"]["code"], "queue_full");
  EXPECT_TRUE(body["error"]["param"].is_null());
  EXPECT_STREQ(serve::api_error_type(400), "invalid_request_error");
  EXPECT_STREQ(serve::api_error_type(503), "server_error");
}

}  // namespace
}  // namespace minfer::test
