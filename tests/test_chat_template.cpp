// The chat templates rendered in C++ (tokenizers/chat_template.h) against Python's jinja2.
//
// tests/data/chat_templates/cases.json was written by make_chat_fixtures.py: the published
// templates in templates/ rendered with jinja2 as transformers' apply_chat_template renders them,
// for each conversation with and without the generation prompt; the text, or the message of the
// template's raise_exception when it refuses the conversation. It also holds published templates
// edited, each marked with whether jinja2 renders it as the original (then minfer must recognise
// it) or not (then minfer must refuse it).
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/test_support.h"
#include "tokenizers/chat_template.h"
#include "tokenizers/python_json.h"

namespace minfer {
namespace {

using json = nlohmann::json;
using test::error_of;
using test::printable;

const json& fixtures() {
  static const json j =
      json::parse(test::read_file(std::string(MINFER_SOURCE_DIR) + "/tests/data/chat_templates/cases.json"));
  return j;
}

std::string template_text(const std::string& file) {
  return test::read_file(std::string(MINFER_SOURCE_DIR) + "/tests/data/chat_templates/templates/" + file);
}

const json& template_entry(const std::string& file) {
  for (const json& t : fixtures()["templates"]) {
    if (t["file"] == file) return t;
  }
  throw Error("no template " + file + " in cases.json");
}

std::vector<ChatMessage> conversation(const std::string& name) {
  std::vector<ChatMessage> messages;
  for (const json& m : fixtures()["conversations"][name]) messages.push_back({m["role"], m["content"]});
  return messages;
}

// The fixture's template, recognised from its text, with the fixture's date for Llama 3.2.
ChatTemplate from_fixture(const json& entry) {
  ChatTemplate t = ChatTemplate::from_text(template_text(entry["file"]), entry["bos_token"], entry["eos_token"]);
  t.set_today(fixtures()["today"]);
  return t;
}

// Where two renderings part, for a failure message that can be read.
std::string difference(const std::string& expected, const std::string& actual) {
  size_t at = 0;
  while (at < expected.size() && at < actual.size() && expected[at] == actual[at]) ++at;
  const size_t from = at > 20 ? at - 20 : 0;
  return "they differ at byte " + std::to_string(at) + ":\n  jinja2: ..." + printable(expected.substr(from, 60)) +
         "\n  minfer: ..." + printable(actual.substr(from, 60)) + "\n  jinja2 (all): " + printable(expected) +
         "\n  minfer (all): " + printable(actual);
}

std::string joined(const std::vector<ChatPiece>& pieces, bool special) {
  std::string out;
  for (const ChatPiece& p : pieces) {
    if (p.special == special) out += p.text;
  }
  return out;
}

// One fixture case: the text jinja2 rendered, or the error it raised.
void check_case(const ChatTemplate& t, const json& c) {
  const std::vector<ChatMessage> messages = conversation(c["conversation"]);
  const bool prompt = c["add_generation_prompt"];
  SCOPED_TRACE(c["template"].get<std::string>() + " (" + t.variant() + "), conversation " +
               c["conversation"].get<std::string>() + (prompt ? ", with" : ", without") + " the generation prompt");
  if (c.contains("text")) {
    const std::string expected = c["text"];
    std::string actual;
    const std::string error = error_of([&] { actual = t.render_text(messages, prompt); });
    ASSERT_EQ(error, "(no error)");
    EXPECT_EQ(actual, expected) << difference(expected, actual);
  } else {
    const std::string error = error_of([&] { t.render(messages, prompt); });
    EXPECT_NE(error.find(c["error"].get<std::string>()), std::string::npos)
        << "minfer says: " << error << "\njinja2 says: " << c["error"];
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(ChatTemplate, RendersEveryCaseAsJinja2Does) {
  std::map<std::string, ChatTemplate> templates;
  for (const json& entry : fixtures()["templates"]) templates.emplace(entry["file"], from_fixture(entry));
  size_t texts = 0, refusals = 0;
  for (const json& c : fixtures()["cases"]) {
    check_case(templates.at(c["template"]), c);
    ++(c.contains("text") ? texts : refusals);
  }
  std::printf("[ fixture  ] %zu templates: %zu renderings and %zu refusals as jinja2's (%s)\n", templates.size(),
              texts, refusals, fixtures()["generator"].get<std::string>().c_str());
  EXPECT_GE(templates.size(), 18u);
  EXPECT_GE(refusals, 100u);
}

TEST(ChatTemplate, RecognisesEveryPublishedTemplate) {
  for (const json& entry : fixtures()["templates"]) {
    SCOPED_TRACE(entry["file"].get<std::string>());
    const ChatTemplate t = from_fixture(entry);
    EXPECT_EQ(t.name(), entry["family"]);
    EXPECT_EQ(t.variant(), entry["variant"]);
  }
  const json& smollm2 = template_entry("chatml-smollm2.jinja");
  EXPECT_EQ(from_fixture(smollm2).default_system(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(from_fixture(template_entry("chatml-qwen2.jinja")).default_system(), "You are a helpful assistant.");
  EXPECT_EQ(from_fixture(template_entry("chatml-qwen2.5.jinja")).default_system(),
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_EQ(from_fixture(template_entry("chatml-openhermes.jinja")).default_system(), "");
}

// The default system message is read from the template, not compared.
TEST(ChatTemplate, ReadsAnotherDefaultSystemMessage) {
  std::string text = template_text("chatml-qwen2.5.jinja");
  const std::string qwen = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
  for (size_t at = text.find(qwen); at != std::string::npos; at = text.find(qwen, at)) {
    text.replace(at, qwen.size(), "You are Qwen Coder.");
  }
  const ChatTemplate t = ChatTemplate::from_text(text, "", "<|im_end|>");
  EXPECT_EQ(t.variant(), "qwen2.5");
  EXPECT_EQ(t.default_system(), "You are Qwen Coder.");
  EXPECT_EQ(t.render_text({{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are Qwen Coder.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, RecognisesLayoutEditsAndRefusesOutputEdits) {
  size_t same = 0;
  for (const json& edit : fixtures()["edits"]) {
    const json& original = template_entry(edit["template"]);
    SCOPED_TRACE(edit["template"].get<std::string>() + " edited: " + edit["change"].get<std::string>());
    const std::string error = error_of([&] { ChatTemplate::from_text(edit["text"], "<s>", "</s>"); });
    if (edit["renders_same"]) {
      ASSERT_EQ(error, "(no error)");
      EXPECT_EQ(ChatTemplate::from_text(edit["text"], "<s>", "</s>").variant(), original["variant"]);
      ++same;
    } else {
      EXPECT_NE(error.find("chat template not recognised"), std::string::npos) << error;
    }
  }
  EXPECT_GE(same, 5u);
  EXPECT_GE(fixtures()["edits"].size() - same, 5u);
}

TEST(ChatTemplate, RefusesAnUnknownTemplateInOneLine) {
  const std::string error = error_of([] { ChatTemplate::from_text("{{ messages }}", "<s>", "</s>"); });
  EXPECT_EQ(error,
            "chat template not recognised ({{ messages }}); choose one with --chat-template NAME "
            "(chatml, llama2, llama3, mistral, zephyr, gemma, phi3)");
  // A long template: its first 60 characters, on one line.
  std::string qwen3 = template_text("chatml-qwen2.5.jinja");
  qwen3.replace(qwen3.rfind("'<|im_start|>assistant\\n'"), 25, "'<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'");
  const std::string long_error = error_of([&] { ChatTemplate::from_text(qwen3, "", "<|im_end|>"); });
  EXPECT_EQ(long_error.find('\n'), std::string::npos) << long_error;
  EXPECT_NE(long_error.find("({%- if tools %}\\n    {{- '<|im_start|>system\\n' }}\\n    {%- if...)"),
            std::string::npos)
      << long_error;
  EXPECT_NE(error_of([] { ChatTemplate::from_text("", "<s>", "</s>"); }).find("not recognised (empty)"),
            std::string::npos);
}

// Each --chat-template NAME renders one of the published templates, exactly as jinja2 does.
TEST(ChatTemplate, NamedTemplatesRenderTheirPublishedTemplate) {
  ASSERT_EQ(ChatTemplate::names(),
            (std::vector<std::string>{"chatml", "llama2", "llama3", "mistral", "zephyr", "gemma", "phi3"}));
  for (const std::string& name : ChatTemplate::names()) {
    SCOPED_TRACE("--chat-template " + name);
    size_t checked = 0;
    for (const json& entry : fixtures()["templates"]) {
      ChatTemplate t = ChatTemplate::named(name, entry["bos_token"], entry["eos_token"]);
      EXPECT_EQ(t.name(), name);
      if (entry["variant"] != t.variant()) continue;
      t.set_today(fixtures()["today"]);
      for (const json& c : fixtures()["cases"]) {
        if (c["template"] != entry["file"]) continue;
        check_case(t, c);
        ++checked;
      }
    }
    EXPECT_GE(checked, 40u);
  }
  const std::string error = error_of([] { ChatTemplate::named("vicuna", "<s>", "</s>"); });
  EXPECT_EQ(error, "unknown chat template \"vicuna\"; choose one of: chatml, llama2, llama3, mistral, zephyr, gemma, phi3");
}

// What a user typed is never tokenized as markers: with every message's content a distinct
// marker-free word, the special pieces hold none of them and the plain pieces nothing else.
TEST(ChatTemplate, MessageContentIsNeverInASpecialPiece) {
  size_t renders = 0;
  for (const json& entry : fixtures()["templates"]) {
    const ChatTemplate t = from_fixture(entry);
    for (const auto& item : fixtures()["conversations"].items()) {
      std::vector<ChatMessage> messages = conversation(item.key());
      std::vector<std::string> words;
      for (size_t i = 0; i < messages.size(); ++i) words.push_back(messages[i].content = "Msg" + std::to_string(i) + "x");
      std::vector<ChatPiece> pieces;
      if (error_of([&] { pieces = t.render(messages, true); }) != "(no error)") continue;
      SCOPED_TRACE(t.variant() + ", conversation " + item.key());
      std::string plain = joined(pieces, false);
      for (const std::string& word : words) {
        EXPECT_EQ(joined(pieces, true).find(word), std::string::npos);
        const size_t at = plain.find(word);
        if (at != std::string::npos) plain.erase(at, word.size());
      }
      EXPECT_EQ(plain, "");
      ++renders;
    }
  }
  EXPECT_GE(renders, 250u);
}

// The plain pieces are the messages' contents in order (trimmed where the template trims;
// these have no white space at their ends), but where a template moves or drops the system message.
TEST(ChatTemplate, PlainPiecesAreTheContentsInOrder) {
  for (const json& entry : fixtures()["templates"]) {
    const ChatTemplate t = from_fixture(entry);
    for (const char* name : {"multi-turn", "system-user-assistant-user", "unicode", "special-text"}) {
      const std::vector<ChatMessage> messages = conversation(name);
      std::vector<ChatPiece> pieces;
      if (error_of([&] { pieces = t.render(messages, true); }) != "(no error)") continue;
      SCOPED_TRACE(t.variant() + ", conversation " + name);
      std::string expected;
      for (size_t i = 0; i < messages.size(); ++i) {
        const bool system = messages[i].role == "system";
        if (system && t.variant() == "phi3-2024-04") continue;  // writes no system message
        if (system && t.variant() == "mistral-v0.3") continue;  // opens the last user message with it
        if (i + 1 == messages.size() && messages[0].role == "system" && t.variant() == "mistral-v0.3") {
          expected += messages[0].content;
        }
        expected += messages[i].content;
      }
      EXPECT_EQ(joined(pieces, false), expected);
    }
  }
}

// Templates that write BOS write it as a special piece, at the start (encode without add_special).
TEST(ChatTemplate, BosIsASpecialPieceOfTheTemplatesThatWriteIt) {
  for (const char* file : {"llama2-chat.jinja", "llama3-instruct.jinja", "llama3.1-instruct.jinja",
                           "mistral-v0.2.jinja", "mistral-v0.3.jinja", "gemma-it.jinja", "gemma3-it.jinja"}) {
    SCOPED_TRACE(file);
    const json& entry = template_entry(file);
    const std::vector<ChatPiece> pieces = from_fixture(entry).render({{"user", "Hi"}}, true);
    ASSERT_FALSE(pieces.empty());
    EXPECT_TRUE(pieces[0].special);
    EXPECT_EQ(pieces[0].text.rfind(entry["bos_token"].get<std::string>(), 0), 0u) << pieces[0].text;
  }
  const std::vector<ChatPiece> chatml = ChatTemplate::named("chatml", "<s>", "<|im_end|>").render({{"user", "Hi"}}, true);
  EXPECT_EQ(joined(chatml, true).find("<s>"), std::string::npos);
}

TEST(ChatTemplate, EndOfTurnPerFamily) {
  const std::map<std::string, std::vector<std::string>> expected = {
      {"chatml", {"<|im_end|>"}}, {"llama2", {"</s>"}},         {"llama3", {"<|eot_id|>"}}, {"mistral", {"</s>"}},
      {"zephyr", {"</s>"}},       {"gemma", {"<end_of_turn>"}}, {"phi3", {"<|end|>"}}};
  for (const std::string& name : ChatTemplate::names()) {
    EXPECT_EQ(ChatTemplate::named(name, "<s>", "</s>").end_of_turn(), expected.at(name)) << name;
  }
  for (const json& entry : fixtures()["templates"]) {  // llama2, mistral, zephyr: the template's eos_token
    const std::string family = entry["family"];
    const bool eos = expected.at(family)[0] == "</s>";
    EXPECT_EQ(from_fixture(entry).end_of_turn(), eos ? std::vector<std::string>{entry["eos_token"]} : expected.at(family))
        << entry["file"];
  }
}

TEST(ChatTemplate, RefusesUnknownRolesAndEmptyConversations) {
  const ChatTemplate t = ChatTemplate::named("chatml", "", "<|im_end|>");
  const std::string empty = error_of([&] { t.render({}, true); });
  EXPECT_NE(empty.find("no messages"), std::string::npos) << empty;
  const std::string tool = error_of([&] { t.render({{"user", "Hi"}, {"tool", "42"}}, true); });
  EXPECT_NE(tool.find("chat message 2 has role \"tool\""), std::string::npos) << tool;
  EXPECT_EQ(tool.find('\n'), std::string::npos);
}

// Llama 3.2's template writes today's date (transformers' strftime_now): "05 Mar 2025".
TEST(ChatTemplate, Llama32WritesTodaysDate) {
  const json& entry = template_entry("llama3.2-instruct.jinja");
  const ChatTemplate t = ChatTemplate::from_text(template_text("llama3.2-instruct.jinja"), entry["bos_token"],
                                                 entry["eos_token"]);
  const std::string text = t.render_text({{"user", "Hi"}}, false);
  const std::string label = "Today Date: ";
  const size_t at = text.find(label);
  ASSERT_NE(at, std::string::npos) << text;
  const std::string date = text.substr(at + label.size(), 11);
  EXPECT_TRUE(isdigit(date[0]) && isdigit(date[1]) && date[2] == ' ' && isupper(date[3]) && date[6] == ' ' &&
              isdigit(date[7]) && isdigit(date[10]))
      << printable(date);
}

// ---- Tool calling: the templates that render tools, against jinja2 (cases.json's tool_cases) ----

using ordered_json = nlohmann::ordered_json;

// The fixtures again with the keys in their order: a tool's schema is written in the order it came.
const ordered_json& tool_fixtures() {
  static const ordered_json j = ordered_json::parse(
      test::read_file(std::string(MINFER_SOURCE_DIR) + "/tests/data/chat_templates/cases.json"));
  return j;
}

// A fixture's conversation as the server passes it on: a call's arguments as JSON text.
std::vector<ChatMessage> tool_conversation(const std::string& name) {
  std::vector<ChatMessage> messages;
  for (const ordered_json& m : tool_fixtures()["tool_conversations"][name]) {
    ChatMessage message{m["role"], m["content"].is_null() ? "" : m["content"].get<std::string>(), {}, ""};
    if (m.contains("tool_calls")) {
      for (const ordered_json& call : m["tool_calls"])
        message.tool_calls.push_back({call["id"], call["function"]["name"], call["function"]["arguments"].dump()});
    }
    if (m.contains("tool_call_id")) message.tool_call_id = m["tool_call_id"];
    messages.push_back(std::move(message));
  }
  return messages;
}

std::vector<std::string> tool_texts(const ordered_json& name) {
  std::vector<std::string> out;
  if (name.is_null()) return out;
  for (const ordered_json& tool : tool_fixtures()["tools"][name.get<std::string>()]) out.push_back(tool.dump());
  return out;
}

TEST(ChatTemplateTools, RendersEveryToolCaseAsJinja2Does) {
  size_t texts = 0, refusals = 0;
  for (const ordered_json& c : tool_fixtures()["tool_cases"]) {
    const ChatTemplate t = from_fixture(template_entry(c["template"]));
    const std::vector<ChatMessage> messages = tool_conversation(c["conversation"]);
    const std::vector<std::string> tools = tool_texts(c["tools"]);
    const bool prompt = c["add_generation_prompt"];
    SCOPED_TRACE(c["template"].get<std::string>() + ", conversation " + c["conversation"].get<std::string>() +
                 ", tools " + c["tools"].dump() + (prompt ? ", with" : ", without") + " the generation prompt");
    if (c.contains("text")) {
      const std::string expected = c["text"];
      std::string actual;
      ASSERT_EQ(error_of([&] { actual = t.render_text(messages, prompt, tools); }), "(no error)");
      EXPECT_EQ(actual, expected) << difference(expected, actual);
      ++texts;
    } else {
      const std::string error = error_of([&] { t.render(messages, prompt, tools); });
      EXPECT_NE(error.find(c["error"].get<std::string>()), std::string::npos)
          << "minfer says: " << error << "\njinja2 says: " << c["error"];
      EXPECT_EQ(error.find('\n'), std::string::npos) << error;
      ++refusals;
    }
  }
  std::printf("[ fixture  ] tool calling: %zu renderings and %zu refusals as jinja2's\n", texts, refusals);
  EXPECT_GE(texts, 200u);
  EXPECT_GE(refusals, 30u);
}

// The tools, the calls' names, arguments and ids and the results are the client's: never special.
TEST(ChatTemplateTools, ToolsCallsAndResultsAreNeverSpecial) {
  for (const char* file : {"chatml-qwen2.5.jinja", "llama3.1-instruct.jinja", "mistral-v0.3.jinja"}) {
    SCOPED_TRACE(file);
    const ChatTemplate t = from_fixture(template_entry(file));
    const std::vector<ChatPiece> pieces =
        t.render(tool_conversation("call-and-result"), true, tool_texts(ordered_json("weather")));
    const std::string special = joined(pieces, true), plain = joined(pieces, false);
    for (const char* client : {"get_weather", "The city", "Paris", "celsius", "temperature", "It is 21 C"}) {
      EXPECT_EQ(special.find(client), std::string::npos) << client;
      EXPECT_NE(plain.find(client), std::string::npos) << client;
    }
  }
}

TEST(ChatTemplateTools, OnlyTheToolTemplatesRenderTools) {
  std::vector<std::string> renders;
  for (const json& entry : fixtures()["templates"]) {
    const ChatTemplate t = from_fixture(entry);
    if (t.renders_tools()) {
      renders.push_back(t.variant());
      continue;
    }
    SCOPED_TRACE(t.variant());
    const std::string tools = error_of([&] { t.render({{"user", "Hi"}}, true, tool_texts(ordered_json("weather"))); });
    EXPECT_EQ(tools, "chat template " + t.variant() + " does not render tools");
    const std::string result = error_of([&] { t.render(tool_conversation("tool-first"), true); });
    EXPECT_NE(result.find("chat message 1 has role \"tool\"; chat template " + t.variant()), std::string::npos)
        << result;
    ChatMessage calling{"assistant", "", {{"call00001", "f", "{}"}}, ""};
    const std::string calls = error_of([&] { t.render({{"user", "Hi"}, calling}, true); });
    EXPECT_EQ(calls, "chat message 2 has tool calls; chat template " + t.variant() + " does not render tools");
  }
  EXPECT_EQ(renders, (std::vector<std::string>{"qwen2.5", "llama3.1", "llama3.2", "mistral-v0.3"}));
}

TEST(ChatTemplateTools, RefusesMalformedToolsAndArguments) {
  const ChatTemplate t = from_fixture(template_entry("chatml-qwen2.5.jinja"));
  EXPECT_EQ(error_of([&] { t.render({{"user", "Hi"}}, true, {"{\"type\": "}); }), "tool 1 is not JSON");
  EXPECT_EQ(error_of([&] { t.render({{"user", "Hi"}}, true, {"{\"type\": \"function\"}"}); }),
            "tool 1 is not an object with a \"function\" object");
  ChatMessage calling{"assistant", "", {{"call00001", "f", "{\"a\": "}}, ""};
  EXPECT_EQ(error_of([&] { t.render({{"user", "Hi"}, calling}, true); }),
            "the arguments of tool call call00001 (f) are not JSON");
}

// json.dumps with ensure_ascii=False, and repr of floats (the values from Python 3).
TEST(PythonJson, WritesAsJsonDumps) {
  const std::vector<std::pair<double, const char*>> floats = {
      {0.1, "0.1"}, {1e16, "1e+16"}, {1e-5, "1e-05"}, {123456789.0, "123456789.0"}, {1.5e300, "1.5e+300"},
      {5e-324, "5e-324"}, {0.0001, "0.0001"}, {1e15, "1000000000000000.0"}, {2.5e-7, "2.5e-07"}, {-0.0, "-0.0"},
      {1.0 / 3, "0.3333333333333333"}, {1.7976931348623157e308, "1.7976931348623157e+308"}, {12345.678, "12345.678"}};
  for (const auto& [x, repr] : floats) EXPECT_EQ(python_float(x), repr) << repr;
  const ordered_json v = ordered_json::parse("{\"b\": [1, {}, [], 2.0], \"a\": {\"c\": \"\\u007f\\u2028\\u001f\\\"\"}}");
  EXPECT_EQ(python_json(v), "{\"b\": [1, {}, [], 2.0], \"a\": {\"c\": \"\x7f\u2028\\u001f\\\"\"}}");
  EXPECT_EQ(python_json(v, 2),
            "{\n  \"b\": [\n    1,\n    {},\n    [],\n    2.0\n  ],\n  \"a\": {\n    \"c\": \"\x7f\u2028\\u001f\\\"\"\n  }\n}");
}

}  // namespace
}  // namespace minfer
