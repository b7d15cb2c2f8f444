// Tool calling: the request's tools, the history's calls, and the answer's calls (tool_calls.h).
#include "serve/tool_calls.h"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <utility>

#include "serve/serve_api.h"

namespace minfer::serve {
namespace {

using ordered_json = nlohmann::ordered_json;

[[noreturn]] void refuse(const std::string& param, const std::string& message) {
  throw ApiError{400, message, param, ""};
}

// A client's field name inside an error message, bounded.
std::string quoted(const std::string& key) { return "'" + one_line(key, 64) + "'"; }

// OpenAI's rule for a function's name: 1 to 64 of a-z, A-Z, 0-9, _ and -.
bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxToolNameBytes) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

std::string name_rule() {
  return "1 to " + std::to_string(kMaxToolNameBytes) + " characters of a-z, A-Z, 0-9, _ and -";
}

// tools[i]: {"type": "function", "function": {"name", "description", "parameters", "strict"}}.
void parse_tool(const ordered_json& tool, size_t i, ToolRequest& out) {
  const std::string at = "tools[" + std::to_string(i) + "]";
  if (!tool.is_object()) refuse("tools", at + " must be an object");
  for (const auto& item : tool.items()) {
    if (item.key() != "type" && item.key() != "function")
      refuse("tools", at + ": unknown field " + quoted(item.key()) + " (only type and function)");
  }
  if (!tool.contains("type") || tool["type"] != "function")
    refuse("tools", at + ".type must be \"function\" (the only kind of tool)");
  if (!tool.contains("function") || !tool["function"].is_object()) refuse("tools", at + ".function must be an object");
  const ordered_json& function = tool["function"];
  std::string parameters;
  for (const auto& item : function.items()) {
    const std::string& key = item.key();
    const ordered_json& v = item.value();
    if (key == "name") {
      if (!v.is_string() || !valid_name(v.get<std::string>()))
        refuse("tools", at + ".function.name must be " + name_rule());
    } else if (key == "description") {
      if (!v.is_string() && !v.is_null()) refuse("tools", at + ".function.description must be a string");
    } else if (key == "parameters") {
      if (!v.is_object() && !v.is_null()) refuse("tools", at + ".function.parameters must be a JSON schema object");
      if (v.is_object()) parameters = v.dump();
    } else if (key == "strict") {
      if (!v.is_boolean() && !v.is_null()) refuse("tools", at + ".function.strict must be a boolean");
    } else {
      refuse("tools", at + ".function: unknown field " + quoted(key) + " (name, description, parameters, strict)");
    }
  }
  if (!function.contains("name")) refuse("tools", at + ".function.name is required");
  const std::string name = function["name"];
  if (std::find(out.names.begin(), out.names.end(), name) != out.names.end())
    refuse("tools", at + ".function.name '" + name + "' is the name of another tool too");
  std::string text = tool.dump();
  if (text.size() > kMaxToolBytes)
    refuse("tools", at + " is " + std::to_string(text.size()) + " bytes of JSON; a tool may have at most " +
                        std::to_string(kMaxToolBytes));
  out.tools.push_back(std::move(text));
  out.names.push_back(name);
  out.parameters.push_back(std::move(parameters));
}

// tool_choice: "none", "auto", "required" or {"type": "function", "function": {"name": NAME}}.
void parse_tool_choice(const ordered_json& v, ToolRequest& out) {
  const char* const kinds = "tool_choice must be \"none\", \"auto\", \"required\" or "
                            "{\"type\": \"function\", \"function\": {\"name\": ...}}";
  if (v.is_null() || v == "auto") return;
  if (v == "none") {
    out.choice = ToolRequest::Choice::none;
  } else if (v == "required") {
    out.choice = ToolRequest::Choice::required;
  } else if (v.is_object()) {
    for (const auto& item : v.items()) {
      if (item.key() != "type" && item.key() != "function")
        refuse("tool_choice", "tool_choice: unknown field " + quoted(item.key()) + " (only type and function)");
    }
    if (!v.contains("type") || v["type"] != "function" || !v.contains("function") || !v["function"].is_object() ||
        v["function"].size() != 1 || !v["function"].contains("name") || !v["function"]["name"].is_string())
      refuse("tool_choice", kinds);
    out.named = v["function"]["name"];
    if (std::find(out.names.begin(), out.names.end(), out.named) == out.names.end())
      refuse("tool_choice", "tool_choice names the function '" + one_line(out.named, kMaxToolNameBytes) +
                                "', which is not among the tools");
    out.choice = ToolRequest::Choice::named;
  } else {
    refuse("tool_choice", kinds);
  }
}

// A call's arguments as JSON, at most kMaxArgumentsDepth deep; nullopt when malformed or deeper.
std::optional<ordered_json> parse_bounded_json(const std::string& text) {
  struct TooDeep {};
  try {
    return ordered_json::parse(text, [](int depth, ordered_json::parse_event_t, ordered_json&) {
      if (depth >= static_cast<int>(kMaxArgumentsDepth)) throw TooDeep{};  // depth: the containers around
      return true;
    });
  } catch (const TooDeep&) {
    return std::nullopt;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::optional<ToolRequest> parse_tool_request(const ordered_json& tools, const ordered_json& tool_choice,
                                              const ordered_json& parallel_tool_calls) {
  if (!parallel_tool_calls.is_null() && !parallel_tool_calls.is_boolean())
    refuse("parallel_tool_calls", "parallel_tool_calls must be a boolean");
  if (tools.is_null() || (tools.is_array() && tools.empty())) {
    if (!(tool_choice.is_null() || tool_choice == "none" || tool_choice == "auto"))
      refuse("tool_choice", "tool_choice asks for a tool call, but the request has no tools");
    return std::nullopt;
  }
  if (!tools.is_array() || tools.size() > kMaxTools)
    refuse("tools", "tools must be an array of at most " + std::to_string(kMaxTools) + " tools");
  ToolRequest out;
  for (size_t i = 0; i < tools.size(); ++i) parse_tool(tools[i], i, out);
  parse_tool_choice(tool_choice, out);
  out.parallel = !parallel_tool_calls.is_boolean() || parallel_tool_calls.get<bool>();
  return out;
}

std::vector<ChatToolCall> parse_history_tool_calls(const nlohmann::json& v, const std::string& name) {
  std::vector<ChatToolCall> calls;
  if (v.is_null()) return calls;
  if (!v.is_array() || v.size() > kMaxToolCallsPerMessage)
    refuse("messages", name + " must be an array of at most " + std::to_string(kMaxToolCallsPerMessage) + " calls");
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = name + "[" + std::to_string(i) + "]";
    const nlohmann::json& call = v[i];
    if (!call.is_object()) refuse("messages", at + " must be an object");
    for (const auto& item : call.items()) {
      if (item.key() != "id" && item.key() != "type" && item.key() != "function")
        refuse("messages", at + ": unknown field " + quoted(item.key()) + " (id, type, function)");
    }
    if (!call.contains("type") || call["type"] != "function") refuse("messages", at + ".type must be \"function\"");
    ChatToolCall out;
    out.id = parse_tool_call_id(call.contains("id") ? call["id"] : nlohmann::json(), at + ".id");
    const auto function = call.find("function");
    if (function == call.end() || !function->is_object()) refuse("messages", at + ".function must be an object");
    for (const auto& item : function->items()) {
      if (item.key() != "name" && item.key() != "arguments")
        refuse("messages", at + ".function: unknown field " + quoted(item.key()) + " (name, arguments)");
    }
    const auto fname = function->find("name");
    if (fname == function->end() || !fname->is_string() || !valid_name(fname->get<std::string>()))
      refuse("messages", at + ".function.name must be " + name_rule());
    out.name = *fname;
    const auto arguments = function->find("arguments");
    if (arguments == function->end() || !arguments->is_string())
      refuse("messages", at + ".function.arguments must be a string (the JSON text of an object)");
    const std::optional<ordered_json> parsed = parse_bounded_json(*arguments);
    if (!parsed || !parsed->is_object())
      refuse("messages", at + ".function.arguments is not the JSON text of an object (nested at most " +
                             std::to_string(kMaxArgumentsDepth) + " deep)");
    out.arguments = *arguments;
    calls.push_back(std::move(out));
  }
  return calls;
}

std::string parse_tool_call_id(const nlohmann::json& v, const std::string& name) {
  if (!v.is_string() || v.get_ref<const std::string&>().empty() ||
      v.get_ref<const std::string&>().size() > kMaxToolCallIdBytes)
    refuse("messages", name + " must be a string of 1 to " + std::to_string(kMaxToolCallIdBytes) + " bytes");
  return v;
}

ToolFormat tool_format(const ChatTemplate& chat) {
  if (chat.name() == "llama3") return ToolFormat::llama3;
  if (chat.name() == "mistral") return ToolFormat::mistral;
  return ToolFormat::qwen;
}

std::optional<ToolCallParsing> prepare_tool_calls(CompletionRequest& request, const ChatTemplate& chat) {
  const ToolRequest& tools = *request.tools;
  if (!chat.renders_tools())
    refuse("tools", "chat template " + chat.variant() + " does not render tools (minfer renders them with Qwen2.5's, "
                    "Llama 3.1's and 3.2's and Mistral v0.3's templates)");
  if (tools.choice == ToolRequest::Choice::none) return std::nullopt;
  const ToolFormat format = tool_format(chat);
  if (std::optional<OutputConstraint> constraint = tool_choice_constraint(tools, format)) {
    if (request.output)
      refuse("tool_choice", "tool_choice asks for a tool call, and " + request.output->param +
                                " for another format: give one of them");
    request.output = std::move(constraint);
  }
  return ToolCallParsing{format, tools.names, tools.parallel};
}

namespace {

const char* arguments_key(ToolFormat format) { return format == ToolFormat::llama3 ? "parameters" : "arguments"; }

// The schema of one call of tool i: {"name": that name, ARGUMENTS: its parameters}.
ordered_json call_schema(const ToolRequest& request, size_t i, ToolFormat format) {
  const ordered_json parameters = request.parameters[i].empty() ? ordered_json{{"type", "object"}}
                                                                : ordered_json::parse(request.parameters[i]);
  return {{"type", "object"},
          {"properties", {{"name", {{"type", "string"}, {"enum", {request.names[i]}}}},
                          {arguments_key(format), parameters}}},
          {"required", {"name", arguments_key(format)}},
          {"additionalProperties", false}};
}

}  // namespace

std::optional<OutputConstraint> tool_choice_constraint(const ToolRequest& request, ToolFormat format) {
  if (request.choice != ToolRequest::Choice::required && request.choice != ToolRequest::Choice::named)
    return std::nullopt;
  ordered_json one_of = ordered_json::array();
  for (size_t i = 0; i < request.names.size(); ++i) {
    if (request.choice == ToolRequest::Choice::required || request.names[i] == request.named)
      one_of.push_back(call_schema(request, i, format));
  }
  ordered_json call = one_of.size() == 1 ? one_of[0] : ordered_json{{"anyOf", one_of}};
  ordered_json schema = call;
  if (format == ToolFormat::mistral) {
    schema = {{"type", "array"}, {"items", call}, {"minItems", 1}};
    if (!request.parallel) schema["maxItems"] = 1;
  }
  return OutputConstraint{OutputConstraint::Kind::json_schema, schema.dump(), false, "tool_choice"};
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string trimmed(const std::string& s) {
  size_t begin = 0, end = s.size();
  while (begin < end && is_space(s[begin])) ++begin;
  while (end > begin && is_space(s[end - 1])) --end;
  return s.substr(begin, end - begin);
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// The marker that opens the calls anywhere in an answer, per format.
const char* marker(ToolFormat format) {
  switch (format) {
    case ToolFormat::qwen: return "<tool_call>";
    case ToolFormat::llama3: return "<|python_tag|>";
    case ToolFormat::mistral: return "[TOOL_CALLS]";
  }
  return "";
}

// What may open an answer that is calls without the marker (a bare call, a fenced one).
std::vector<std::string> openers(ToolFormat format) {
  if (format == ToolFormat::qwen) return {"{", "```"};
  if (format == ToolFormat::mistral) return {"{", "["};
  return {"{"};
}

// One call object: {"name": NAME, "arguments" or "parameters": an object or its JSON text}.
std::optional<ParsedToolCall> call_of(const ordered_json& v, const ToolCallParsing& parsing) {
  if (!v.is_object() || !v.contains("name") || !v["name"].is_string()) return std::nullopt;
  const std::string name = v["name"];
  if (std::find(parsing.names.begin(), parsing.names.end(), name) == parsing.names.end()) return std::nullopt;
  const char* key = v.contains("arguments") ? "arguments" : "parameters";
  if (!v.contains(key)) return std::nullopt;
  std::optional<ordered_json> arguments = v[key];
  if (arguments->is_string()) arguments = parse_bounded_json(v[key].get<std::string>());
  if (!arguments || !arguments->is_object()) return std::nullopt;
  return ParsedToolCall{name, arguments->dump()};
}

// A JSON text holding one call or (`array`) an array of calls, all of them valid.
bool add_calls(const std::string& text, bool array, const ToolCallParsing& parsing, std::vector<ParsedToolCall>& out) {
  const std::optional<ordered_json> v = parse_bounded_json(text);
  if (!v) return false;
  const ordered_json list = array && v->is_array() ? *v : ordered_json::array({*v});
  if (list.empty()) return false;
  for (const ordered_json& item : list) {
    std::optional<ParsedToolCall> call = call_of(item, parsing);
    if (!call) return false;
    out.push_back(std::move(*call));
  }
  return true;
}

// Qwen's calls from `at` on: <tool_call> JSON </tool_call> blocks and white space (the last block
// may lack its closing tag: the answer ended at the end of the turn).
bool qwen_blocks(const std::string& text, size_t at, const ToolCallParsing& parsing, std::vector<ParsedToolCall>& out) {
  const std::string open = "<tool_call>", close = "</tool_call>";
  while (true) {
    while (at < text.size() && is_space(text[at])) ++at;
    if (at == text.size()) return !out.empty();
    if (text.compare(at, open.size(), open) != 0) return false;
    at += open.size();
    const size_t end = text.find(close, at);
    if (!add_calls(text.substr(at, end == std::string::npos ? std::string::npos : end - at), false, parsing, out))
      return false;
    at = end == std::string::npos ? text.size() : end + close.size();
  }
}

// An answer that is calls without the marker: a bare object (or Mistral's array), for Qwen maybe
// in a ```json fence.
bool bare_calls(const std::string& answer, const ToolCallParsing& parsing, std::vector<ParsedToolCall>& out) {
  std::string text = trimmed(answer);
  if (parsing.format == ToolFormat::qwen && starts_with(text, "```")) {
    const size_t newline = text.find('\n');
    if (newline == std::string::npos || text.size() < newline + 4 || text.compare(text.size() - 3, 3, "```") != 0)
      return false;
    text = text.substr(newline + 1, text.size() - 3 - newline - 1);
  }
  return add_calls(text, parsing.format == ToolFormat::mistral, parsing, out);
}

}  // namespace

std::optional<ParsedAnswer> parse_tool_calls(const std::string& text, const ToolCallParsing& parsing) {
  ParsedAnswer answer;
  const std::string open = marker(parsing.format);
  const size_t at = text.find(open);
  bool parsed;
  if (at != std::string::npos) {
    if (!trimmed(text.substr(0, at)).empty()) answer.content = text.substr(0, at);
    parsed = parsing.format == ToolFormat::qwen ? qwen_blocks(text, at, parsing, answer.calls)
                                                : add_calls(text.substr(at + open.size()),
                                                            parsing.format == ToolFormat::mistral, parsing,
                                                            answer.calls);
  } else {
    parsed = bare_calls(text, parsing, answer.calls);
  }
  if (!parsed) return std::nullopt;
  if (!parsing.parallel) answer.calls.resize(1);
  return answer;
}

std::string new_tool_call_id(ToolFormat format) {
  static const char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 generator{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, sizeof(kAlphabet) - 2);
  std::string id = format == ToolFormat::mistral ? "" : "call_";
  for (size_t i = 0, n = format == ToolFormat::mistral ? 9 : 24; i < n; ++i) id += kAlphabet[pick(generator)];
  return id;
}

namespace {

// The calls as OpenAI's tool_calls, with new ids; in a stream's delta each with its index.
ordered_json tool_calls_json(const std::vector<ParsedToolCall>& calls, ToolFormat format, bool delta) {
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    ordered_json call;
    if (delta) call["index"] = i;
    call["id"] = new_tool_call_id(format);
    call["type"] = "function";
    call["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    out.push_back(std::move(call));
  }
  return out;
}

}  // namespace

void put_tool_calls(ordered_json& choice, const std::string& text, const ToolCallParsing& parsing) {
  if (choice["finish_reason"] != "stop") return;
  const std::optional<ParsedAnswer> answer = parse_tool_calls(text, parsing);
  if (!answer) return;
  ordered_json& message = choice["message"];
  message["content"] = answer->content ? ordered_json(*answer->content) : ordered_json(nullptr);
  message["tool_calls"] = tool_calls_json(answer->calls, parsing.format, false);
  choice["finish_reason"] = "tool_calls";
}

std::string ToolCallStream::release(size_t end) {
  std::string out = answer_.substr(sent_, end - sent_);
  sent_ = end;
  return out;
}

std::string ToolCallStream::push(const std::string& text) {
  answer_ += text;
  if (holding_) return "";
  const std::string open = marker(parsing_.format);
  size_t first = sent_;  // the answer's first byte that is not white space, while none was sent
  while (sent_ == 0 && first < answer_.size() && is_space(answer_[first])) ++first;
  if (first == answer_.size()) return "";
  if (sent_ == 0) {  // at the start: a bare call, or what may still become one, is held
    std::vector<std::string> starts = openers(parsing_.format);
    starts.push_back(open);
    const std::string head = answer_.substr(first);
    for (const std::string& s : starts) {
      if (starts_with(head, s)) {
        holding_ = true;
        return "";
      }
      if (starts_with(s, head)) return "";
    }
  }
  const size_t at = answer_.find(open, sent_);
  if (at != std::string::npos) {
    holding_ = true;
    return release(at);
  }
  // The end of the answer that may be the marker's beginning waits for the next piece.
  size_t keep = std::min(open.size() - 1, answer_.size() - sent_);
  while (keep > 0 && answer_.compare(answer_.size() - keep, keep, open, 0, keep) != 0) --keep;
  return release(answer_.size() - keep);
}

ToolCallStream::Ending ToolCallStream::finish(const std::string& text, const char* finish_reason) {
  answer_ += text;
  const std::optional<ParsedAnswer> answer =
      std::string(finish_reason) == "stop" ? parse_tool_calls(answer_, parsing_) : std::nullopt;
  if (!answer) return {release(answer_.size()), ordered_json::array(), finish_reason};
  // The content before the calls went out already, but for white space held at the start.
  const size_t content = answer->content ? answer->content->size() : 0;
  return {release(std::max(content, sent_)), tool_calls_json(answer->calls, parsing_.format, true), "tool_calls"};
}

void put_tool_call_deltas(ordered_json& chunk, const ordered_json& tool_calls) {
  chunk["choices"][0]["delta"]["tool_calls"] = tool_calls;
}

}  // namespace minfer::serve
