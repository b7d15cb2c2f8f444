// Tool calling (serve/tool_calls.h): the request's tools and tool_choice checked at their limits, a
// history's calls read, each family's answers parsed into calls (and what is not a call left as
// text), and a stream parsed as the whole answer is, wherever its pieces are cut.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/serve_api.h"
#include "serve/tool_calls.h"

namespace minfer::serve {
namespace {

using ordered_json = nlohmann::ordered_json;

ordered_json weather_tool(const std::string& name = "get_weather") {
  const ordered_json parameters = {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}};
  return {{"type", "function"},
          {"function", {{"name", name}, {"description", "The weather."}, {"parameters", parameters}}}};
}

// The ApiError's message of `fn`, "" when it throws none.
template <typename Fn>
std::string refusal(Fn fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.message.find('\n'), std::string::npos);
    return e.param + ": " + e.message;
  }
  return "";
}

std::string tools_refusal(const ordered_json& tools, const ordered_json& choice = nullptr,
                          const ordered_json& parallel = nullptr) {
  return refusal([&] { parse_tool_request(tools, choice, parallel); });
}

ToolCallParsing parsing(ToolFormat format, bool parallel = true) {
  return {format, {"get_weather", "get_time"}, parallel};
}

// The calls as "name(arguments)" lines, and the content, for comparisons that read well.
std::string summary(const std::optional<ParsedAnswer>& answer) {
  if (!answer) return "(text)";
  std::string out = answer->content ? "content=[" + *answer->content + "]" : "content=null";
  for (const ParsedToolCall& call : answer->calls) out += " " + call.name + call.arguments;
  return out;
}

std::string parsed(const std::string& text, ToolFormat format, bool parallel = true) {
  return summary(parse_tool_calls(text, parsing(format, parallel)));
}

TEST(ToolRequest, TakesToolsAndEachToolChoice) {
  const ordered_json tools = {weather_tool(), weather_tool("get_time")};
  std::optional<ToolRequest> r = parse_tool_request(tools, nullptr, nullptr);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->names, (std::vector<std::string>{"get_weather", "get_time"}));
  EXPECT_EQ(r->tools[0], weather_tool().dump());  // keys as sent
  EXPECT_EQ(r->parameters[0], weather_tool()["function"]["parameters"].dump());
  EXPECT_EQ(r->choice, ToolRequest::Choice::automatic);
  EXPECT_TRUE(r->parallel);
  EXPECT_EQ(parse_tool_request(tools, "none", false)->choice, ToolRequest::Choice::none);
  EXPECT_FALSE(parse_tool_request(tools, "none", false)->parallel);
  EXPECT_EQ(parse_tool_request(tools, "required", nullptr)->choice, ToolRequest::Choice::required);
  const ordered_json named = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  EXPECT_EQ(parse_tool_request(tools, named, nullptr)->named, "get_time");
  EXPECT_FALSE(parse_tool_request(nullptr, "auto", nullptr));
  EXPECT_FALSE(parse_tool_request(ordered_json::array(), "none", nullptr));  // [] is no tools
}

TEST(ToolRequest, RefusesEachMalformedFieldNamingIt) {
  const ordered_json tools = {weather_tool()};
  EXPECT_EQ(tools_refusal(nullptr, "required"),
            "tool_choice: tool_choice asks for a tool call, but the request has no tools");
  EXPECT_EQ(tools_refusal(tools, "sometimes"),
            "tool_choice: tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
            "\"function\": {\"name\": ...}}");
  EXPECT_EQ(tools_refusal(tools, {{"type", "function"}, {"function", {{"name", "nope"}}}}),
            "tool_choice: tool_choice names the function 'nope', which is not among the tools");
  EXPECT_EQ(tools_refusal(tools, nullptr, "yes"), "parallel_tool_calls: parallel_tool_calls must be a boolean");
  EXPECT_EQ(tools_refusal("x"), "tools: tools must be an array of at most 128 tools");
  EXPECT_EQ(tools_refusal(ordered_json::array({{{"type", "retrieval"}}})),
            "tools: tools[0].type must be \"function\" (the only kind of tool)");
  ordered_json extra = weather_tool();
  extra["cache"] = true;
  EXPECT_EQ(tools_refusal(ordered_json::array({extra})),
            "tools: tools[0]: unknown field 'cache' (only type and function)");
  extra = weather_tool();
  extra["function"]["examples"] = 1;
  EXPECT_EQ(tools_refusal(ordered_json::array({extra})),
            "tools: tools[0].function: unknown field 'examples' (name, description, parameters, strict)");
  extra = weather_tool();
  extra["function"]["parameters"] = "{}";
  EXPECT_EQ(tools_refusal(ordered_json::array({extra})),
            "tools: tools[0].function.parameters must be a JSON schema object");
  extra = weather_tool();
  extra["function"].erase("name");
  EXPECT_EQ(tools_refusal(ordered_json::array({extra})), "tools: tools[0].function.name is required");
  EXPECT_EQ(tools_refusal(ordered_json::array({weather_tool(), weather_tool()})),
            "tools: tools[1].function.name 'get_weather' is the name of another tool too");
  EXPECT_EQ(tools_refusal(ordered_json::array({weather_tool("get weather")})),
            "tools: tools[0].function.name must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -");
}

// Each limit at its value and one past it.
TEST(ToolRequest, LimitsHoldAtTheBoundary) {
  ordered_json many = ordered_json::array();
  for (size_t i = 0; i < kMaxTools; ++i) many.push_back(weather_tool("f" + std::to_string(i)));
  EXPECT_EQ(tools_refusal(many), "");
  many.push_back(weather_tool("one_more"));
  EXPECT_EQ(tools_refusal(many), "tools: tools must be an array of at most 128 tools");

  EXPECT_EQ(tools_refusal(ordered_json::array({weather_tool(std::string(kMaxToolNameBytes, 'n'))})), "");
  EXPECT_EQ(tools_refusal(ordered_json::array({weather_tool(std::string(kMaxToolNameBytes + 1, 'n'))})),
            "tools: tools[0].function.name must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -");
  EXPECT_NE(tools_refusal(ordered_json::array({weather_tool("")})), "");

  ordered_json big = weather_tool();
  big["function"]["description"] = "";
  big["function"]["description"] = std::string(kMaxToolBytes - big.dump().size(), 'd');
  ASSERT_EQ(big.dump().size(), kMaxToolBytes);
  EXPECT_EQ(tools_refusal(ordered_json::array({big})), "");
  big["function"]["description"] = big["function"]["description"].get<std::string>() + "d";
  EXPECT_EQ(tools_refusal(ordered_json::array({big})),
            "tools: tools[0] is 32769 bytes of JSON; a tool may have at most 32768");
}

nlohmann::json history_call(const std::string& id, const std::string& arguments) {
  return {{"id", id}, {"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", arguments}}}};
}

std::string history_refusal(const nlohmann::json& calls) {
  return refusal([&] { parse_history_tool_calls(calls, "messages[1].tool_calls"); });
}

TEST(ToolHistory, ReadsCallsAndRefusesThemPastTheLimits) {
  const std::vector<ChatToolCall> calls =
      parse_history_tool_calls(nlohmann::json::array({history_call("call_1", "{\"city\": \"Paris\"}")}),
                               "messages[1].tool_calls");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].id, "call_1");
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, "{\"city\": \"Paris\"}");  // as sent: the template writes it in its own way

  nlohmann::json many = nlohmann::json::array();
  for (size_t i = 0; i < kMaxToolCallsPerMessage; ++i) many.push_back(history_call("c" + std::to_string(i), "{}"));
  EXPECT_EQ(history_refusal(many), "");
  many.push_back(history_call("c", "{}"));
  EXPECT_EQ(history_refusal(many), "messages: messages[1].tool_calls must be an array of at most 64 calls");

  EXPECT_EQ(history_refusal(nlohmann::json::array({history_call(std::string(kMaxToolCallIdBytes, 'i'), "{}")})), "");
  EXPECT_EQ(history_refusal(nlohmann::json::array({history_call(std::string(kMaxToolCallIdBytes + 1, 'i'), "{}")})),
            "messages: messages[1].tool_calls[0].id must be a string of 1 to 128 bytes");

  // Arguments nested kMaxArgumentsDepth deep (the object itself is the first level) and one more.
  auto nested = [](size_t depth) {
    return "{\"a\": " + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}";
  };
  EXPECT_EQ(history_refusal(nlohmann::json::array({history_call("c", nested(kMaxArgumentsDepth))})), "");
  EXPECT_EQ(history_refusal(nlohmann::json::array({history_call("c", nested(kMaxArgumentsDepth + 1))})),
            "messages: messages[1].tool_calls[0].function.arguments is not the JSON text of an object (nested at "
            "most 64 deep)");
  EXPECT_NE(history_refusal(nlohmann::json::array({history_call("c", "[1]")})), "");
  EXPECT_NE(history_refusal(nlohmann::json::array({history_call("c", "{\"a\": ")})), "");
  nlohmann::json object_arguments = history_call("c", "{}");
  object_arguments["function"]["arguments"] = nlohmann::json::object();
  EXPECT_EQ(history_refusal(nlohmann::json::array({object_arguments})),
            "messages: messages[1].tool_calls[0].function.arguments must be a string (the JSON text of an object)");
  nlohmann::json extra = history_call("c", "{}");
  extra["index"] = 0;
  EXPECT_EQ(history_refusal(nlohmann::json::array({extra})),
            "messages: messages[1].tool_calls[0]: unknown field 'index' (id, type, function)");
}

TEST(ToolCallParser, QwenBlocksWithTextBeforeAndInParallel) {
  EXPECT_EQ(parsed("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                   ToolFormat::qwen),
            "content=null get_weather{\"city\":\"Paris\"}");
  EXPECT_EQ(parsed("Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                   "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n",
                   ToolFormat::qwen),
            "content=[Let me look.\n] get_weather{\"city\":\"Paris\"} get_time{}");
  // The last block may lack its closing tag; arguments may be JSON text.
  EXPECT_EQ(parsed("<tool_call>\n{\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": \\\"UTC\\\"}\"}",
                   ToolFormat::qwen),
            "content=null get_time{\"tz\":\"UTC\"}");
  // parallel_tool_calls false: the first call only.
  EXPECT_EQ(parsed("<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call><tool_call>{\"name\": "
                   "\"get_weather\", \"arguments\": {}}</tool_call>",
                   ToolFormat::qwen, false),
            "content=null get_time{}");
}

TEST(ToolCallParser, BareCallsAsQwenCoderLlamaAndMistralWriteThem) {
  EXPECT_EQ(parsed(" {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n", ToolFormat::qwen),
            "content=null get_weather{\"city\":\"Oslo\"}");
  EXPECT_EQ(parsed("```json\n{\"name\": \"get_time\", \"arguments\": {}}\n```", ToolFormat::qwen),
            "content=null get_time{}");
  EXPECT_EQ(parsed("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}", ToolFormat::llama3),
            "content=null get_weather{\"city\":\"Rome\"}");
  EXPECT_EQ(parsed("<|python_tag|>{\"name\": \"get_time\", \"parameters\": {}}", ToolFormat::llama3),
            "content=null get_time{}");
  EXPECT_EQ(parsed("[TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\": {}}, {\"name\": \"get_weather\", "
                   "\"arguments\": {\"city\": \"Bern\"}, \"id\": \"abcdefghi\"}]",
                   ToolFormat::mistral),
            "content=null get_time{} get_weather{\"city\":\"Bern\"}");
  EXPECT_EQ(parsed("Sure. [TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]", ToolFormat::mistral),
            "content=[Sure. ] get_time{}");
  EXPECT_EQ(parsed("[{\"name\": \"get_time\", \"arguments\": {}}]", ToolFormat::mistral), "content=null get_time{}");
}

// Whatever is not wholly calls of the tools offered stays text.
TEST(ToolCallParser, WhatIsNotACallStaysText) {
  for (const std::string& text : std::vector<std::string>{
           "Hello there.", "", "{\"name\": \"get_weather\", \"arguments\": {\"city\": ",
           "{\"name\": \"launch_missiles\", \"arguments\": {}}", "{\"name\": \"get_time\", \"arguments\": [1]}",
           "{\"name\": \"get_time\"}",
           "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call> and more",
           "<tool_call>\nnot json\n</tool_call>", "{\"city\": \"Paris\"}", "```json\n{\"name\": \"get_time\"",
           "{\"name\": \"get_time\", \"arguments\": {\"a\": " + std::string(100, '[') + std::string(100, ']') + "}}"}) {
    EXPECT_EQ(parsed(text, ToolFormat::qwen), "(text)") << text;
  }
  EXPECT_EQ(parsed("[TOOL_CALLS] []", ToolFormat::mistral), "(text)");
  EXPECT_EQ(parsed("The answer is {\"name\": \"get_time\", \"parameters\": {}}", ToolFormat::llama3), "(text)");
}

TEST(ToolCallParser, AnswersCarryIdsToolCallsAndTheirFinishReason) {
  ordered_json choice = {{"index", 0},
                         {"message", {{"role", "assistant"}, {"content", "x"}}},
                         {"logprobs", nullptr},
                         {"finish_reason", "stop"}};
  const std::string text = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  ordered_json cut = choice;
  cut["finish_reason"] = "length";
  put_tool_calls(cut, text, parsing(ToolFormat::qwen));
  EXPECT_EQ(cut["message"]["content"], "x");  // an answer cut by max_tokens is text
  put_tool_calls(choice, text, parsing(ToolFormat::qwen));
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  const ordered_json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"], (ordered_json{{"name", "get_time"}, {"arguments", "{}"}}));
  const std::string id = call["id"];
  EXPECT_EQ(id.size(), 29u);
  EXPECT_EQ(id.rfind("call_", 0), 0u);
  EXPECT_NE(new_tool_call_id(ToolFormat::qwen), new_tool_call_id(ToolFormat::qwen));
  const std::string mistral = new_tool_call_id(ToolFormat::mistral);
  EXPECT_EQ(mistral.size(), 9u);  // Mistral's template refuses other lengths
  for (char c : mistral) {
    EXPECT_TRUE(isalnum(static_cast<unsigned char>(c))) << mistral;
  }
}

// A stream's content and calls, its text pushed in the given pieces.
std::string streamed(const std::vector<std::string>& pieces, ToolFormat format, std::string* early = nullptr) {
  ToolCallStream stream(parsing(format));
  std::string content;
  for (size_t i = 0; i + 1 < pieces.size(); ++i) content += stream.push(pieces[i]);
  if (early) *early = content;
  ToolCallStream::Ending end = stream.finish(pieces.empty() ? "" : pieces.back(), "stop");
  content += end.content;
  std::string out = end.tool_calls.empty() ? "(text) " + content
                     : content.empty()        ? "content=null"
                                              : "content=[" + content + "]";
  for (const ordered_json& call : end.tool_calls) {
    EXPECT_EQ(call["type"], "function");
    out += " " + call["function"]["name"].get<std::string>() + call["function"]["arguments"].get<std::string>();
  }
  if (!end.tool_calls.empty()) {
    EXPECT_STREQ(end.finish_reason, "tool_calls");
  }
  return out;
}

// The stream parses as the whole answer does wherever it is cut, and byte by byte.
TEST(ToolCallStream, EverySplitGivesTheWholeAnswersCalls) {
  const std::vector<std::pair<std::string, ToolFormat>> answers = {
      {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
       ToolFormat::qwen},
      {"  Checking <tool>s.\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n<tool_call>"
       "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\"}}</tool_call>",
       ToolFormat::qwen},
      {"\n {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}", ToolFormat::qwen},
      {"```json\n{\"name\": \"get_time\", \"arguments\": {}}\n```", ToolFormat::qwen},
      {"A plain answer with < and <tool_ but no call.", ToolFormat::qwen},
      {"{not a call}", ToolFormat::qwen},
      {"<|python_tag|>{\"name\": \"get_time\", \"parameters\": {}}", ToolFormat::llama3},
      {"It is {\"name\": \"x\"}", ToolFormat::llama3},
      {"Sure. [TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\": {}}]", ToolFormat::mistral},
      {"[{\"name\": \"get_time\", \"arguments\": {}}]", ToolFormat::mistral},
  };
  for (const auto& [text, format] : answers) {
    SCOPED_TRACE(text);
    const std::optional<ParsedAnswer> whole = parse_tool_calls(text, parsing(format));
    const std::string expected = whole ? summary(whole) : "(text) " + text;
    for (size_t cut = 0; cut <= text.size(); ++cut)
      EXPECT_EQ(streamed({text.substr(0, cut), text.substr(cut)}, format), expected) << "cut at " << cut;
    std::vector<std::string> bytes;
    for (char c : text) bytes.push_back(std::string(1, c));
    bytes.push_back("");
    EXPECT_EQ(streamed(bytes, format), expected);
  }
}

// Text goes out as it comes: only what may begin a call is held back.
TEST(ToolCallStream, TextIsNotHeldBack) {
  std::string early;
  std::vector<std::string> pieces = {"Hello", " world", ", <tool", ""};
  EXPECT_EQ(streamed(pieces, ToolFormat::qwen, &early), "(text) Hello world, <tool");
  EXPECT_EQ(early, "Hello world, ");
  pieces = {"{\"name\"", ": 1}", ""};  // may be a bare call: held to the end
  EXPECT_EQ(streamed(pieces, ToolFormat::qwen, &early), "(text) {\"name\": 1}");
  EXPECT_EQ(early, "");
  ToolCallStream stream(parsing(ToolFormat::qwen));
  EXPECT_EQ(stream.push("Done."), "Done.");
  const ToolCallStream::Ending end = stream.finish("", "length");
  EXPECT_STREQ(end.finish_reason, "length");
  EXPECT_TRUE(end.tool_calls.empty());
}

// tool_choice required or a named function: the schema of one call in the family's format.
TEST(ToolChoice, ConstrainsTheAnswerToACallOfTheToolsOffered) {
  const ordered_json tools = {weather_tool(), weather_tool("get_time")};
  EXPECT_FALSE(tool_choice_constraint(*parse_tool_request(tools, "auto", nullptr), ToolFormat::qwen));
  EXPECT_FALSE(tool_choice_constraint(*parse_tool_request(tools, "none", nullptr), ToolFormat::qwen));
  const std::optional<OutputConstraint> required =
      tool_choice_constraint(*parse_tool_request(tools, "required", nullptr), ToolFormat::qwen);
  ASSERT_TRUE(required);
  EXPECT_EQ(required->kind, OutputConstraint::Kind::json_schema);
  EXPECT_EQ(required->param, "tool_choice");
  const ordered_json schema = ordered_json::parse(required->text);
  ASSERT_EQ(schema["anyOf"].size(), 2u);
  EXPECT_EQ(schema["anyOf"][1]["properties"]["name"]["enum"], ordered_json::array({"get_time"}));
  EXPECT_EQ(schema["anyOf"][0]["properties"]["arguments"], weather_tool()["function"]["parameters"]);
  EXPECT_EQ(schema["anyOf"][0]["required"], ordered_json::array({"name", "arguments"}));

  const ordered_json named = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  const ordered_json llama =
      ordered_json::parse(tool_choice_constraint(*parse_tool_request(tools, named, nullptr), ToolFormat::llama3)->text);
  EXPECT_EQ(llama["properties"]["name"]["enum"], ordered_json::array({"get_time"}));
  EXPECT_TRUE(llama["properties"].contains("parameters"));
  const ordered_json mistral = ordered_json::parse(
      tool_choice_constraint(*parse_tool_request(tools, "required", false), ToolFormat::mistral)->text);
  EXPECT_EQ(mistral["type"], "array");
  EXPECT_EQ(mistral["maxItems"], 1);
}

}  // namespace
}  // namespace minfer::serve
