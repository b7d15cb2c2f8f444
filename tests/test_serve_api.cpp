// The completions API without sockets (serve/serve_api.h): what a request may say, how each
// mistake is refused (status, field, one line), seeds, stop strings, and the error object.
#include <gtest/gtest.h>

#include <limits>
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
           {R"({"prompt": [1], "n": 9})", "n", "n = 9: 1 to 8 choices"},
           {R"({"prompt": [1], "echo": "yes"})", "echo", "must be a boolean"},
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

// One more stop string than the limit is refused, the limit itself is not; likewise a stop
// string's bytes.
TEST(ServeApiParse, StopStringsAtTheirLimits) {
  EXPECT_EQ(parse(R"({"prompt": [1], "stop": ["a", "b", "c", "d"]})").stop.size(), 4u);
  EXPECT_EQ(refusal(R"({"prompt": [1], "stop": ["a", "b", "c", "d", "e"]})").param, "stop");
  EXPECT_TRUE(parse(R"({"prompt": [1], "stop": []})").stop.empty());
  EXPECT_TRUE(parse(R"({"prompt": [1], "stop": null})").stop.empty());
  const std::string longest(1024, 'x');
  EXPECT_EQ(parse(nlohmann::json{{"prompt", {1}}, {"stop", {longest}}}.dump()).stop.at(0), longest);
  const ApiError e = refusal(nlohmann::json{{"prompt", {1}}, {"stop", longest + "x"}}.dump());
  EXPECT_EQ(e.param, "stop");
  EXPECT_NE(e.message.find("1025 bytes is over the limit of 1024"), std::string::npos) << e.message;
}

// top_p and temperature are judged as the floats the sampler gets: a positive top_p that rounds
// to 0 is refused naming top_p (not passed on to the scheduler's check, whose error names no
// field); the smallest positive float passes as itself.
TEST(ServeApiParse, SamplingNumbersAreCheckedAsTheFloatsTheyBecome) {
  const float smallest = std::numeric_limits<float>::denorm_min();
  const double survives = static_cast<double>(smallest);
  EXPECT_EQ(parse(nlohmann::json{{"prompt", {1}}, {"top_p", survives}}.dump()).top_p, smallest);
  EXPECT_EQ(parse(R"({"prompt": [1], "top_p": 1})").top_p, 1.0f);
  for (const char* top_p : {"1e-300", "1e-46", "0", "1.0000000000000002", "-1e-300"}) {
    const ApiError e = refusal(std::string(R"({"prompt": [1], "top_p": )") + top_p + "}");
    EXPECT_EQ(e.param, "top_p") << top_p;
    EXPECT_NE(e.message.find("outside (0, 1]"), std::string::npos) << e.message;
  }
  EXPECT_NE(refusal(R"({"prompt": [1], "top_p": 1e-300})").message.find("is 0 as a 32-bit float"), std::string::npos);
  // A temperature that rounds to 0 is greedy, the limit sampling tends to; [0, 1e6] holds as floats.
  EXPECT_EQ(parse(R"({"prompt": [1], "temperature": 1e-300})").temperature, 0.0f);
  EXPECT_EQ(parse(R"({"prompt": [1], "temperature": 1e6})").temperature, 1e6f);
  EXPECT_EQ(refusal(R"({"prompt": [1], "temperature": 1000000.0001})").param, "temperature");
}

// Whatever a client sends is echoed bounded: a field named by 100 KB gets an answer of a few
// hundred bytes, its name cut in the message and in `param`.
TEST(ServeApiErrors, UnknownFieldNamesAreEchoedBounded) {
  const std::string name(100 << 10, 'k');
  for (bool chat : {false, true}) {
    const std::string body = nlohmann::json{{"prompt", {1}}, {"messages", {{{"role", "user"}, {"content", "x"}}}},
                                            {name, 1}}.dump();
    ApiError e;
    try {
      chat ? serve::parse_chat_request(body, kLimits) : parse(body);
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& refused) {
      e = refused;
    }
    EXPECT_LE(e.param.size(), 67u);  // 64 bytes and "..."
    EXPECT_EQ(e.param.compare(0, 64, name, 0, 64), 0);
    EXPECT_LT(e.message.size(), 100u) << e.message;
    EXPECT_LT(serve::error_body(e).size(), 300u);
  }
  // And whatever a refusal holds, the error object is bounded.
  const std::string huge(1 << 20, 'h');
  EXPECT_LT(serve::error_body({400, huge, huge, ""}).size(), 1400u);
}

// `user` changes nothing but is still held to its type and a size; a content part may have only
// the fields minfer knows.
TEST(ServeApiParse, UserAndContentPartsAreCheckedToo) {
  EXPECT_NO_THROW(parse(nlohmann::json{{"prompt", {1}}, {"user", std::string(256, 'u')}}.dump()));
  EXPECT_NO_THROW(parse(R"({"prompt": [1], "user": null})"));
  const std::string long_user = nlohmann::json(std::string(257, 'u')).dump();
  for (const std::string& user : {std::string(R"({"id": 1})"), std::string("7"), long_user}) {
    const ApiError e = refusal(R"({"prompt": [1], "user": )" + user + "}");
    EXPECT_EQ(e.param, "user") << user;
  }
  auto chat_refusal = [](const std::string& body) {
    try {
      serve::parse_chat_request(body, kLimits);
    } catch (const ApiError& e) {
      return e;
    }
    ADD_FAILURE() << "accepted: " << body;
    return ApiError{};
  };
  const std::string part = R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi", )";
  const ApiError e = chat_refusal(part + R"("cache_control": {"type": "ephemeral"}}]}]})");
  EXPECT_EQ(e.param, "messages");
  EXPECT_NE(e.message.find("messages[0].content[0]: unknown field 'cache_control'"), std::string::npos) << e.message;
  EXPECT_EQ(chat_refusal(R"({"messages": [{"role": "user", "content": "x"}], "user": {"id": 1}})").param, "user");
  EXPECT_EQ(serve::parse_chat_request(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})",
                                      kLimits)
                .messages.at(0)
                .content,
            "hi");
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
