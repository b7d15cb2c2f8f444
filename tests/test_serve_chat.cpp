// `minfer serve`'s /v1/chat/completions and prompt caching, against a real server process with a
// chat fixture (tests/data/models/smollm-chat: random weights, SmolLM's tokenizer, SmolLM2's chat
// template). A chat's answer is the completion of its rendered prompt up to the end of the turn;
// a stream adds up to the whole answer; a follow-up turn is served mostly from the cache; every
// field OpenAI's API has is taken, or refused with a 400 naming it. The template and its tokens
// themselves: test_chat_format.cpp.
#include <gtest/gtest.h>

#include <algorithm>

#include "formats/model_files.h"
#include "tests/serve_http_support.h"
#include "tests/test_support.h"
#include "tokenizers/chat_format.h"

namespace minfer::test {
namespace {

#if MINFER_HAVE_HTTPLIB

const std::string kChatModel = MINFER_SOURCE_DIR "/tests/data/models/smollm-chat";

class ServeChat : public SharedServer<ServeChat> {
 public:
  static std::vector<std::string> server_args() {
    return {"-m", kChatModel, "--slots", "2", "--ctx", "256", "--max-tokens-limit", "64"};
  }
};

json chat_body(const std::vector<std::pair<std::string, std::string>>& messages, int max_tokens) {
  json m = json::array();
  for (const auto& [role, content] : messages) m.push_back({{"role", role}, {"content", content}});
  return {{"messages", m}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

std::vector<int32_t> chat_ids(const std::vector<ChatMessage>& messages) {
  auto tokenizer = load_model_tokenizer(kChatModel);
  const ChatFormat format(*tokenizer, "");
  return format.encode(messages, true);
}

TEST_F(ServeChat, AnswerIsTheCompletionOfTheRenderedPromptToTheEndOfTheTurn) {
  Answer chat = post(port(), chat_body({{"system", "Be brief."}, {"user", "Hello there"}}, 24).dump(),
                     "/v1/chat/completions");
  ASSERT_EQ(chat.status, 200) << chat.raw;
  EXPECT_EQ(chat.body["object"], "chat.completion");
  EXPECT_EQ(chat.body["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  const json& choice = chat.body["choices"][0];
  EXPECT_EQ(choice["message"]["role"], "assistant");
  const std::vector<int32_t> prompt = chat_ids({{"system", "Be brief."}, {"user", "Hello there"}});
  EXPECT_EQ(chat.body["usage"]["prompt_tokens"], prompt.size());

  // The same prompt as ids on /v1/completions: the fixture's EOS is <|im_end|>, the end of the turn.
  Answer plain = post(port(), json{{"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}}.dump());
  ASSERT_EQ(plain.status, 200) << plain.raw;
  EXPECT_EQ(choice["message"]["content"], plain.body["choices"][0]["text"]);
  EXPECT_EQ(choice["finish_reason"], plain.body["choices"][0]["finish_reason"]);
  EXPECT_EQ(chat.body["usage"]["completion_tokens"], plain.body["usage"]["completion_tokens"]);
}

TEST_F(ServeChat, AStreamOpensWithTheRoleAndAddsUpToTheWholeAnswer) {
  json body = chat_body({{"user", "Tell me a story"}}, 20);
  Answer whole = post(port(), body.dump(), "/v1/chat/completions");
  ASSERT_EQ(whole.status, 200) << whole.raw;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  Answer streamed = post(port(), body.dump(), "/v1/chat/completions");
  ASSERT_EQ(streamed.status, 200) << streamed.raw;
  SseEvents sse = parse_sse(streamed.raw);
  ASSERT_TRUE(sse.well_formed && sse.done) << streamed.raw;
  ASSERT_GE(sse.events.size(), 3u);
  EXPECT_EQ(sse.events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(sse.events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  const json* finish = nullptr;
  for (const json& e : sse.events) {
    if (e["choices"].empty()) continue;  // the usage event
    const json& choice = e["choices"][0];
    if (choice["delta"].contains("content")) text += choice["delta"]["content"].get<std::string>();
    if (!choice["finish_reason"].is_null()) finish = &choice["finish_reason"];
  }
  EXPECT_EQ(text, whole.body["choices"][0]["message"]["content"]);
  ASSERT_NE(finish, nullptr);
  EXPECT_EQ(*finish, whole.body["choices"][0]["finish_reason"]);
  const json& usage = sse.events.back()["usage"];
  EXPECT_TRUE(sse.events.back()["choices"].empty());
  EXPECT_EQ(usage["completion_tokens"], whole.body["usage"]["completion_tokens"]);
}

TEST_F(ServeChat, TheNextTurnIsServedFromTheCache) {
  json body = chat_body({{"user", "What is the capital of France?"}}, 12);
  Answer first = post(port(), body.dump(), "/v1/chat/completions");
  ASSERT_EQ(first.status, 200) << first.raw;
  const int64_t first_prompt = first.body["usage"]["prompt_tokens"];
  json answer = first.body["choices"][0]["message"];
  answer["refusal"] = nullptr;  // as the openai SDK's model_dump() sends an answer back
  answer["tool_calls"] = nullptr;
  body["messages"].push_back(answer);
  body["messages"].push_back({{"role", "user"}, {"content", "And of Italy?"}});
  const double before = metrics(port()).get("minfer_prompt_tokens_cached_total");
  Answer second = post(port(), body.dump(), "/v1/chat/completions");
  ASSERT_EQ(second.status, 200) << second.raw;
  // /metrics counts every cached token (a request's are counted at its admission, before it answers).
  const int64_t cached = int64_t(metrics(port()).get("minfer_prompt_tokens_cached_total") - before);
  // The first turn's prompt at least (its last token or two may tokenize otherwise once the answer follows).
  EXPECT_GE(cached, first_prompt - 2) << second.raw;
  EXPECT_LT(cached, second.body["usage"]["prompt_tokens"].get<int64_t>());
  // The client is told whole blocks of 64 only.
  EXPECT_EQ(second.body["usage"]["prompt_tokens_details"]["cached_tokens"], cached / 64 * 64) << second.raw;
}

TEST_F(ServeChat, TakesOpenAIsFieldsAndRefusesWhatItDoesNotDo) {
  const std::string route = "/v1/chat/completions";
  json ok = chat_body({{"user", "hi"}}, 4);
  ok["seed"] = 0;  // any integer, 0 included
  ok["max_completion_tokens"] = 3;
  ok["max_tokens"] = nullptr;
  ok["top_p"] = 0.5;
  ok["stop"] = {"zzz"};
  ok["n"] = 1;
  ok["user"] = "someone";
  ok["metadata"] = {{"k", "v"}};
  ok["response_format"] = {{"type", "text"}};
  ok["tools"] = json::array();
  ok["logprobs"] = false;
  ok["messages"][0]["content"] = json::array({{{"type", "text"}, {"text", "hi "}}, {{"type", "text"}, {"text", "there"}}});
  ok["messages"].insert(ok["messages"].begin(), json{{"role", "developer"}, {"content", "Be kind."}});
  Answer a = post(port(), ok.dump(), route);
  ASSERT_EQ(a.status, 200) << a.raw;
  EXPECT_LE(a.body["usage"]["completion_tokens"].get<int>(), 3);

  // Without max_tokens the answer runs to the end of its turn (here within --max-tokens-limit 64).
  json open = chat_body({{"user", "Go on and on"}}, 1);
  open.erase("max_tokens");
  Answer whole_turn = post(port(), open.dump(), route);
  ASSERT_EQ(whole_turn.status, 200) << whole_turn.raw;
  const std::vector<int32_t> prompt = chat_ids({{"user", "Go on and on"}});
  Answer plain = post(port(), json{{"prompt", prompt}, {"max_tokens", 64}, {"temperature", 0}}.dump());
  ASSERT_EQ(plain.status, 200) << plain.raw;
  EXPECT_EQ(whole_turn.body["usage"]["completion_tokens"], plain.body["usage"]["completion_tokens"]);
  EXPECT_GT(whole_turn.body["usage"]["completion_tokens"].get<int>(), 16);  // not /v1/completions' default
  EXPECT_EQ(whole_turn.body["choices"][0]["finish_reason"], plain.body["choices"][0]["finish_reason"]);

  auto refused = [&](const std::function<void(json&)>& change, const std::string& fragment) {
    json body = chat_body({{"user", "hi"}}, 4);
    change(body);
    expect_api_error(post(port(), body.dump(), route), 400, fragment);
  };
  refused([](json& b) { b.erase("messages"); }, "messages is required");
  refused([](json& b) { b["messages"] = json::array(); }, "messages is empty");
  refused([](json& b) { b["messages"][0]["role"] = "tool"; }, "a tool message needs its tool_call_id");
  refused([](json& b) { b["messages"][0]["role"] = "ipython"; }, "role 'ipython' is not supported");
  refused([](json& b) { b["messages"][0].erase("content"); }, "has no content");
  refused([](json& b) { b["messages"][0]["content"] = json::array({{{"type", "image_url"}}}); }, "only text");
  refused([](json& b) { b["messages"][0]["refusal"] = "no"; }, "refusal is not supported");
  refused([](json& b) { b["messages"][0]["name"] = "bob"; }, "name is not supported");
  refused([](json& b) { b["messages"][0]["colour"] = "red"; }, "unknown field 'colour'");
  refused([](json& b) { b["tools"] = json::array({{{"type", "function"}}}); }, "tools[0].function must be an object");
  // SmolLM2's template has no place for tools (serve/tool_calls.h; the tool templates: test_serve_tools.cpp).
  refused([](json& b) { b["tools"] = json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}}); },
          "chat template chatml-default-system does not render tools");
  refused([](json& b) { b["response_format"] = {{"type", "yaml"}}; }, "response_format.type 'yaml' is not supported");
  refused([](json& b) { b["n"] = 9; }, "n = 9: 1 to 8 choices");
  refused([](json& b) { b["top_logprobs"] = 1; }, "top_logprobs needs \"logprobs\": true");
  refused([](json& b) { b["max_completion_tokens"] = 5; }, "disagree");
  refused([](json& b) { b["prompt"] = "x"; }, "unknown field 'prompt'");
  refused([](json& b) { b["max_completion_tokens"] = 1000; }, "over this server's limit");
  refused([](json& b) { b["user"] = {{"id", 7}}; }, "user must be a string");
  refused([](json& b) { b["messages"][0]["content"] = json::array({{{"type", "text"}, {"text", "hi"}, {"x", 1}}}); },
          "messages[0].content[0]: unknown field 'x'");
  // 100 KB of message cannot fit in 256 tokens of at most 50 bytes: refused before it is encoded.
  refused([](json& b) { b["messages"][0]["content"] = std::string(100 << 10, 'a'); },
          "bytes is over this server's limit of 256 tokens (--max-prompt-tokens): no token of this model stands for");
  EXPECT_EQ(post(port(), chat_body({{"user", "still here?"}}, 2).dump(), route).status, 200);
}

// A model without a chat template answers completions and refuses chats with the reason.
TEST(ServeChatless, AModelWithoutATemplateSaysSo) {
  ServerProcess server({"-m", kTextModel, "--slots", "1", "--ctx", "64"});
  ASSERT_TRUE(server.listening()) << server.log();
  EXPECT_NE(server.log().find("/v1/chat/completions answers 400"), std::string::npos) << server.log();
  expect_api_error(post(server.port(), chat_body({{"user", "hi"}}, 2).dump(), "/v1/chat/completions"), 400,
                   "carries no chat template; choose one with --chat-template");
  EXPECT_EQ(post(server.port(), R"({"prompt": "a", "max_tokens": 2})").status, 200);
  expect_clean_exit(server);
}

// ignore_eos on the chat route generates past the end of the turn too, as on /v1/completions (and
// as llama-server and vLLM do). The text fixture with the llama2 template, whose end of turn is the
// EOS: near-uniform draws from its 1003 tokens meet it within 64 for some seeds.
TEST(ServeChatIgnoreEos, GoesPastTheEndOfTheTurn) {
  ServerProcess server({"-m", kTextModel, "--chat-template", "llama2", "--slots", "1", "--ctx", "128"});
  ASSERT_TRUE(server.listening()) << server.log();
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    json request = {{"messages", {{{"role", "user"}, {"content", "The end."}}}},
                    {"max_tokens", 64}, {"temperature", 1e6}, {"seed", seed}};
    Answer ended = post(server.port(), request.dump(), "/v1/chat/completions");
    ASSERT_EQ(ended.status, 200) << ended.raw;
    if (ended.body["usage"]["completion_tokens"] == 64) continue;
    EXPECT_EQ(ended.body["choices"][0]["finish_reason"], "stop");
    request["ignore_eos"] = true;
    Answer past = post(server.port(), request.dump(), "/v1/chat/completions");
    ASSERT_EQ(past.status, 200) << past.raw;
    EXPECT_EQ(past.body["usage"]["completion_tokens"], 64) << "seed " << seed << ": " << past.raw;
    EXPECT_EQ(past.body["choices"][0]["finish_reason"], "length");
    const std::string before = ended.body["choices"][0]["message"]["content"];
    EXPECT_EQ(past.body["choices"][0]["message"]["content"].get<std::string>().rfind(before, 0), 0u) << "seed " << seed;
    expect_clean_exit(server);
    return;
  }
  FAIL() << "no seed of 200 met the end of the turn in 64 near-uniform draws";
}

#else

TEST(ServeChat, SkippedWithoutHttplib) {
  GTEST_SKIP() << "skipped: this build has no cpp-httplib (apt-get install libcpp-httplib-dev)";
}

#endif

}  // namespace
}  // namespace minfer::test
