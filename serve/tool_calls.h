// Tool calling on /v1/chat/completions: the request's tools, tool_choice and parallel_tool_calls
// checked, the tool calls of a conversation's history read, and the model's answer parsed into
// OpenAI's tool_calls, whole and as a stream's deltas.
//
// The tools are written into the prompt by the model's own chat template (ChatTemplate::render,
// as transformers' apply_chat_template(tools=...) does); the answer is read in that family's
// format (ToolFormat):
//   qwen     Qwen2.5 (and Qwen2.5-Coder): text, then one or more
//            <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> blocks; or the answer is
//            one bare {"name": ..., "arguments": ...} object, maybe in a ```json fence, as
//            Qwen2.5-Coder-0.5B writes it;
//   llama3   Llama 3.1 and 3.2: the answer is one {"name": ..., "parameters": {...}} object, maybe
//            after <|python_tag|>;
//   mistral  Mistral v0.3: [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...], the marker after
//            text or the answer a bare array.
// "arguments" and "parameters" are taken in every format, and arguments that are JSON text of an
// object as well as an object. A call of a function the request did not offer, malformed JSON or
// anything after the calls leaves the whole answer text: it is never half parsed. An answer cut by
// max_tokens is text (finish_reason "length").
//
// tool_choice "required" or a named function holds the answer to one call of the tools offered (of
// that function), a bare JSON object ({"name", "arguments"} or Llama's {"name", "parameters"}; for
// Mistral an array of them) through XGrammar's JSON schema (serve/structured_output.h), so that it
// always parses. "none" renders the tools but never parses a call (as vLLM does); "auto" parses.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/structured_output.h"
#include "tokenizers/chat_template.h"

namespace minfer::serve {

constexpr size_t kMaxTools = 128;                // tools in a request (OpenAI's limit)
constexpr size_t kMaxToolNameBytes = 64;         // a function's name: a-z, A-Z, 0-9, _ and - (OpenAI's rule)
constexpr size_t kMaxToolBytes = 32 * 1024;      // one tool's JSON text: description and parameters' schema
constexpr size_t kMaxToolCallsPerMessage = 64;   // the calls of one assistant message of the history
constexpr size_t kMaxToolCallIdBytes = 128;      // a call's id in the history, and a tool message's tool_call_id
constexpr size_t kMaxArgumentsDepth = 64;        // arrays and objects inside each other in a call's arguments

// The families' formats of a call (see the top of this file).
enum class ToolFormat { qwen, llama3, mistral };

// A request's tools, tool_choice and parallel_tool_calls, checked.
struct ToolRequest {
  std::vector<std::string> tools;       // each tool's JSON text, keys in the client's order (ChatTemplate::render)
  std::vector<std::string> names;       // each tool's function name, all different
  std::vector<std::string> parameters;  // each function's parameters schema as JSON text, "" when it has none
  enum class Choice { none, automatic, required, named };
  Choice choice = Choice::automatic;
  std::string named;                    // Choice::named: the function to call
  bool parallel = true;                 // parallel_tool_calls: false keeps the first call only
};

// `tools` (null or an array of at most kMaxTools function tools), `tool_choice` and
// `parallel_tool_calls` (each null when the request has none), from the body parsed with its keys
// in order. Throws ApiError (400) naming the field; nullopt when there are no tools, null or [] (tool_choice
// then may only be null, "none" or "auto").
std::optional<ToolRequest> parse_tool_request(const nlohmann::ordered_json& tools,
                                              const nlohmann::ordered_json& tool_choice,
                                              const nlohmann::ordered_json& parallel_tool_calls);

// A history message's tool_calls (`name`: "messages[3].tool_calls", for the errors): an array of
// at most kMaxToolCallsPerMessage {"id", "type": "function", "function": {"name", "arguments"}},
// the arguments JSON text of an object. Throws ApiError (400, param "messages").
std::vector<ChatToolCall> parse_history_tool_calls(const nlohmann::json& v, const std::string& name);
// A tool message's tool_call_id: a string of 1 to kMaxToolCallIdBytes bytes.
std::string parse_tool_call_id(const nlohmann::json& v, const std::string& name);

// The format of a chat template that renders tools (ChatTemplate::renders_tools()).
ToolFormat tool_format(const ChatTemplate& chat);

// How a request's answer is parsed; made for a request with tools whose tool_choice is not "none".
struct ToolCallParsing {
  ToolFormat format = ToolFormat::qwen;
  std::vector<std::string> names;  // the functions offered: a call of another is text
  bool parallel = true;
};

struct CompletionRequest;  // serve/serve_api.h

// For a chat request with tools: refuses (ApiError 400, param "tools") a chat template that does
// not render them, and tool_choice "required" or a named function with another constraint
// (response_format, grammar, regex); sets the request's constraint for those; and gives how its
// answer is parsed (nullopt for tool_choice "none").
std::optional<ToolCallParsing> prepare_tool_calls(CompletionRequest& request, const ChatTemplate& chat);

// The constraint of tool_choice "required" or a named function (nullopt for "auto" and "none"):
// the JSON schema of one call in the family's format.
std::optional<OutputConstraint> tool_choice_constraint(const ToolRequest& request, ToolFormat format);

// One parsed call; arguments is the compact JSON text of an object.
struct ParsedToolCall {
  std::string name;
  std::string arguments;
};
struct ParsedAnswer {
  std::optional<std::string> content;  // the text before the calls; nullopt when it is only white space
  std::vector<ParsedToolCall> calls;
};
// The calls of a whole answer, nullopt when it is text (see the top of this file).
std::optional<ParsedAnswer> parse_tool_calls(const std::string& text, const ToolCallParsing& parsing);

// A call's new id: "call_" and 24 letters and digits, or for Mistral (whose template takes ids of
// 9 characters) 9 letters and digits.
std::string new_tool_call_id(ToolFormat format);

// A chat.completion's choice (its "message" and "finish_reason") rewritten for the calls of its
// text when it has any and finished with "stop": content null or the text before the calls,
// tool_calls, finish_reason "tool_calls".
void put_tool_calls(nlohmann::ordered_json& choice, const std::string& text, const ToolCallParsing& parsing);

// A stream's text through the parser: content goes out as it comes until a call may have begun;
// from there the text is held to the end, where it is parsed as a whole answer is.
class ToolCallStream {
 public:
  explicit ToolCallStream(ToolCallParsing parsing) : parsing_(std::move(parsing)) {}
  // The content to send for `text`, the next piece of the answer.
  std::string push(const std::string& text);
  // At the end: `text` is the answer's last piece, `finish_reason` as it would be without tools.
  struct Ending {
    std::string content;                    // content still to send
    nlohmann::ordered_json tool_calls;      // the deltas' tool_calls (index, id, type, function); empty: none
    const char* finish_reason;              // "tool_calls" when there are calls
  };
  Ending finish(const std::string& text, const char* finish_reason);

 private:
  std::string release(size_t end);  // answer_[sent_, end) as content

  ToolCallParsing parsing_;
  std::string answer_;   // the whole answer so far
  size_t sent_ = 0;      // its bytes sent as content
  bool holding_ = false; // a call may begin at sent_: the rest is held to the end
};

// A chunk's (stream_chunk_json's) delta given `tool_calls`.
void put_tool_call_deltas(nlohmann::ordered_json& chunk, const nlohmann::ordered_json& tool_calls);

}  // namespace minfer::serve
