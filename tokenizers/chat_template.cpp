// Chat templates rendered in code, each function beside the Jinja it mirrors. Why there is no
// Jinja interpreter, and why the rendering comes as pieces, is told in chat_template.h.
//
// Recognising a template. A template is recognised when its normal form (tokenizers/
// jinja_normal_form.h: the same output, whatever the layout) equals that of a published template
// minfer renders (tokenizers/chat_template_texts.h, copied from tests/data/chat_templates/templates/),
// so a template edited in any way that changes its output is refused, never rendered wrongly. One
// thing may differ: the default system message of a ChatML template (Qwen's "You are Qwen,
// created by Alibaba Cloud. ...", SmolLM2's "...named SmolLM..."), which is read from the text.
//
// Rendering. Each render_* function follows its template line by line, in the template's order,
// so that a conversation the template refuses is refused with the template's own message and at
// the message where jinja2 would raise it. The pieces follow the template's `+`: what the template
// writes is special, a message's content is text. Python's str.strip() (jinja2's trim filter and
// .strip()) is applied where the template applies it, with Python's set of white-space characters,
// and to what the template applies it to: Llama 2 strips "<<SYS>>\n" + system + ... + the first
// user message as one string.
#include "tokenizers/chat_template.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizers/chat_template_texts.h"
#include "tokenizers/jinja_normal_form.h"
#include "tokenizers/python_json.h"
#include "tokenizers/utf8.h"

namespace minfer {
namespace {

// ---- The rendered conversation -----------------------------------------------------------------

class Pieces {
 public:
  void special(const std::string& s) { add(s, true); }
  void text(const std::string& s) { add(s, false); }
  void append(const Pieces& other) {
    for (const ChatPiece& piece : other.pieces_) add(piece.text, piece.special);
  }
  // Python's str.strip() on the concatenation of the pieces.
  void strip() {
    while (!pieces_.empty()) {
      std::string& first = pieces_.front().text;
      first.erase(0, utf8::python_leading_space(first));
      if (!first.empty()) break;
      pieces_.erase(pieces_.begin());
    }
    while (!pieces_.empty()) {
      std::string& last = pieces_.back().text;
      last.resize(utf8::python_trailing_space_start(last));
      if (!last.empty()) break;
      pieces_.pop_back();
    }
  }
  std::vector<ChatPiece> take() { return std::move(pieces_); }

 private:
  void add(const std::string& s, bool is_special) {  // runs of one kind are joined, empty runs dropped
    if (s.empty()) return;
    if (!pieces_.empty() && pieces_.back().special == is_special) {
      pieces_.back().text += s;
    } else {
      pieces_.push_back({s, is_special});
    }
  }
  std::vector<ChatPiece> pieces_;
};

// What a render function reads: the template's variables and minfer's settings for it.
struct Conversation {
  const std::vector<ChatMessage>& messages;
  bool add_generation_prompt;
  const std::string& bos;
  const std::string& eos;
  const std::string& default_system;  // ChatML
  const std::string& today;           // strftime_now("%d %b %Y")
  const std::string& variant;         // for error messages
  const std::vector<nlohmann::ordered_json>& tools;  // tools=None when empty
};

// The template's raise_exception(message), at messages[index].
[[noreturn]] void refuse(const Conversation& c, size_t index, const char* message) {
  fail("chat template ", c.variant, " refuses this conversation at message ", index + 1, " (",
       c.messages[index].role, "): ", message);
}

const char* const kAlternate = "Conversation roles must alternate user/assistant/user/assistant/...";
const char* const kAlternateAfterSystem =
    "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...";
const char* const kUserAndAssistantOnly = "Only user and assistant roles are supported!";
const char* const kUserAndAssistantAfterSystem =
    "Only user and assistant roles are supported, with the exception of an initial optional system message!";

// {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception(...) }}
void require_alternation(const Conversation& c, size_t index, size_t loop_index0, const char* message) {
  if ((c.messages[index].role == "user") != (loop_index0 % 2 == 0)) refuse(c, index, message);
}

bool opens_with_system(const Conversation& c) { return c.messages.front().role == "system"; }
bool is_last(const Conversation& c, size_t index) { return index + 1 == c.messages.size(); }

// ---- ChatML: SmolLM2, Qwen2, OpenHermes (Qwen2.5 below) ------------------------------------------

// {% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}
// {{ '<|im_start|>system\nDEFAULT<|im_end|>\n' }}{% endif %}
// {{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}
// {% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
void render_chatml(const Conversation& c, Pieces& out) {
  if (!c.default_system.empty() && !opens_with_system(c)) {
    out.special("<|im_start|>system\n" + c.default_system + "<|im_end|>\n");
  }
  for (const ChatMessage& m : c.messages) {
    out.special("<|im_start|>" + m.role + "\n");
    out.text(m.content);
    out.special("<|im_end|>\n");
  }
  if (c.add_generation_prompt) out.special("<|im_start|>assistant\n");
}

// ---- Tool calling: what the templates that render tools share ------------------------------------

bool has_tools(const Conversation& c) { return !c.tools.empty(); }
bool calls_tools(const ChatMessage& m) { return !m.tool_calls.empty(); }

// A call's arguments as the templates see them: the object of its JSON text.
nlohmann::ordered_json arguments_of(const ChatToolCall& call) {
  try {
    return nlohmann::ordered_json::parse(call.arguments);
  } catch (const nlohmann::json::exception&) {
    fail("the arguments of tool call ", call.id, " (", call.name, ") are not JSON");
  }
}

// ---- Qwen2.5: ChatML with tools ------------------------------------------------------------------

const char* const kQwenToolsHead =
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
const char* const kQwenToolsTail =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";

// The system turn: the first system message or the default one, followed by the tools, one
// tojson line each, when there are tools.
void write_qwen_system(const Conversation& c, Pieces& out) {
  out.special("<|im_start|>system\n");
  if (opens_with_system(c)) {
    out.text(c.messages.front().content);
  } else {
    out.special(c.default_system);
  }
  if (has_tools(c)) {
    out.special(kQwenToolsHead);
    for (const nlohmann::ordered_json& tool : c.tools) {
      out.special("\n");
      out.text(python_json(tool));
    }
    out.special(kQwenToolsTail);
  } else {
    out.special("<|im_end|>\n");
  }
}

// An assistant's calls: its content (when not empty) and a <tool_call> block per call.
void write_qwen_calls(const ChatMessage& m, Pieces& out) {
  out.special("<|im_start|>assistant");
  if (!m.content.empty()) {
    out.special("\n");
    out.text(m.content);
  }
  for (const ChatToolCall& call : m.tool_calls) {
    out.special("\n<tool_call>\n{\"name\": \"");
    out.text(call.name);
    out.special("\", \"arguments\": ");
    out.text(python_json(arguments_of(call)));
    out.special("}\n</tool_call>");
  }
  out.special("<|im_end|>\n");
}

// A run of tool messages is one user turn of <tool_response> blocks.
void write_qwen_tool_result(const Conversation& c, size_t i, Pieces& out) {
  if (i == 0 || c.messages[i - 1].role != "tool") out.special("<|im_start|>user");
  out.special("\n<tool_response>\n");
  out.text(c.messages[i].content);
  out.special("\n</tool_response>");
  if (is_last(c, i) || c.messages[i + 1].role != "tool") out.special("<|im_end|>\n");
}

// The first system message (or the default one) goes in the system turn, with the tools; the
// other messages follow as ChatML's, but for an assistant's calls and tool results.
void render_qwen25(const Conversation& c, Pieces& out) {
  write_qwen_system(c, out);
  for (size_t i = 0; i < c.messages.size(); ++i) {
    const ChatMessage& m = c.messages[i];
    if (m.role == "user" || (m.role == "system" && i > 0) || (m.role == "assistant" && !calls_tools(m))) {
      out.special("<|im_start|>" + m.role + "\n");
      out.text(m.content);
      out.special("<|im_end|>\n");
    } else if (m.role == "assistant") {
      write_qwen_calls(m, out);
    } else if (m.role == "tool") {
      write_qwen_tool_result(c, i, out);
    }
  }
  if (c.add_generation_prompt) out.special("<|im_start|>assistant\n");
}

// ---- Llama 2 chat --------------------------------------------------------------------------------

// The system message goes inside the first [INST], and content.strip() strips that whole string.
// A system message at an odd position passes the alternation check and is written nowhere.
void render_llama2(const Conversation& c, Pieces& out) {
  const bool has_system = opens_with_system(c);
  for (size_t i = has_system ? 1 : 0, k = 0; i < c.messages.size(); ++i, ++k) {
    const ChatMessage& m = c.messages[i];
    require_alternation(c, i, k, kAlternate);
    Pieces content;  // {% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}
    if (k == 0 && has_system) {
      content.special("<<SYS>>\n");
      content.text(c.messages.front().content);
      content.special("\n<</SYS>>\n\n");
    }
    content.text(m.content);
    content.strip();
    if (m.role == "user") {  // {{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}
      out.special(c.bos + "[INST] ");
      out.append(content);
      out.special(" [/INST]");
    } else if (m.role == "assistant") {  // {{ ' '  + content.strip() + ' ' + eos_token }}
      out.special(" ");
      out.append(content);
      out.special(" " + c.eos);
    }
  }
}

// ---- Llama 3 Instruct ----------------------------------------------------------------------------

// '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>'
void write_llama3_message(const ChatMessage& m, Pieces& out) {
  out.special("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n");
  out.text(utf8::python_strip(m.content));
  out.special("<|eot_id|>");
}

const char* const kLlamaToolsHead =
    "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for a "
    "function call with its proper arguments that best answers the given prompt.\n\nRespond in the format "
    "{\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n";

// Llama 3.1 and 3.2: a tool's result is an ipython turn (its content through tojson: a string is
// "iterable" to Jinja), an assistant's single call a JSON object with "parameters".
void write_llama3_turn(const Conversation& c, size_t i, Pieces& out) {
  const ChatMessage& m = c.messages[i];
  if (m.role == "tool") {
    out.special("<|start_header_id|>ipython<|end_header_id|>\n\n");
    out.text(python_json(m.content));
    out.special("<|eot_id|>");
  } else if (calls_tools(m)) {
    if (m.tool_calls.size() != 1) refuse(c, i, "This model only supports single tool-calls at once!");
    out.special("<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"");
    out.text(m.tool_calls[0].name);
    out.special("\", \"parameters\": ");
    out.text(python_json(arguments_of(m.tool_calls[0])));
    out.special("}<|eot_id|>");
  } else {
    write_llama3_message(m, out);
  }
}

// The tools go in the first message after the system turn (tools_in_user_message), trimmed, as
// tojson(indent=4) each.
void write_llama3_tools(const Conversation& c, size_t first_user, Pieces& out) {
  if (first_user == c.messages.size()) {
    refuse(c, first_user - 1, "Cannot put tools in the first user message when there's no first user message!");
  }
  out.special(kLlamaToolsHead);
  for (const nlohmann::ordered_json& tool : c.tools) {
    out.text(python_json(tool, 4));
    out.special("\n\n");
  }
  out.text(utf8::python_strip(c.messages[first_user].content));
  out.special("<|eot_id|>");
}

void write_llama3_generation_prompt(const Conversation& c, Pieces& out) {
  if (c.add_generation_prompt) out.special("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Llama 3.0: BOS, then every message, the system message among them.
void render_llama3(const Conversation& c, Pieces& out) {
  out.special(c.bos);
  for (const ChatMessage& m : c.messages) write_llama3_message(m, out);
  write_llama3_generation_prompt(c, out);
}

// Llama 3.1 and 3.2: a system turn always comes first, with the knowledge cutoff and the date
// before the (trimmed) system message, which may be empty; "Environment: ipython" before them when
// there are tools, which then open the first message after it.
void render_llama3_dated(const Conversation& c, const std::string& date, Pieces& out) {
  const bool has_system = opens_with_system(c);
  out.special(c.bos + "<|start_header_id|>system<|end_header_id|>\n\n" +
              (has_tools(c) ? "Environment: ipython\n" : "") + "Cutting Knowledge Date: December 2023\nToday Date: " +
              date + "\n\n");
  if (has_system) out.text(utf8::python_strip(c.messages.front().content));
  out.special("<|eot_id|>");
  size_t next = has_system ? 1 : 0;
  if (has_tools(c)) write_llama3_tools(c, next++, out);
  for (size_t i = next; i < c.messages.size(); ++i) write_llama3_turn(c, i, out);
  write_llama3_generation_prompt(c, out);
}

// {%- if not date_string is defined %}{%- set date_string = "26 Jul 2024" %}
void render_llama31(const Conversation& c, Pieces& out) { render_llama3_dated(c, "26 Jul 2024", out); }
// {%- set date_string = strftime_now("%d %b %Y") %}
void render_llama32(const Conversation& c, Pieces& out) { render_llama3_dated(c, c.today, out); }

// ---- Mistral Instruct ----------------------------------------------------------------------------

// v0.1 (first release) and v0.2: no system message; the alternation check, then the role check.
void render_mistral_inst(const Conversation& c, const std::string& after_answer, Pieces& out) {
  out.special(c.bos);
  for (size_t i = 0; i < c.messages.size(); ++i) {
    const ChatMessage& m = c.messages[i];
    require_alternation(c, i, i, kAlternate);
    if (m.role == "user") {  // {{ '[INST] ' + message['content'] + ' [/INST]' }}
      out.special("[INST] ");
      out.text(m.content);
      out.special(" [/INST]");
    } else if (m.role == "assistant") {  // {{ message['content'] + eos_token + ' ' }} (v0.2: no ' ')
      out.text(m.content);
      out.special(c.eos + after_answer);
    } else {
      refuse(c, i, kUserAndAssistantOnly);
    }
  }
}

void render_mistral_v01(const Conversation& c, Pieces& out) { render_mistral_inst(c, " ", out); }
void render_mistral_v02(const Conversation& c, Pieces& out) { render_mistral_inst(c, "", out); }

// v0.1 as revised in 2024: an optional system message opens the first user message.
void render_mistral_v01_rev2024(const Conversation& c, Pieces& out) {
  const bool has_system = opens_with_system(c);
  out.special(c.bos);
  for (size_t i = has_system ? 1 : 0, k = 0; i < c.messages.size(); ++i, ++k) {
    const ChatMessage& m = c.messages[i];
    require_alternation(c, i, k, kAlternateAfterSystem);
    if (m.role == "user") {  // ' [INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]'
      out.special(" [INST] ");
      if (k == 0 && has_system) {
        out.text(c.messages.front().content);
        out.special("\n\n");
      }
      out.text(m.content);
      out.special(" [/INST]");
    } else if (m.role == "assistant") {  // ' ' + message['content'] + eos_token
      out.special(" ");
      out.text(m.content);
      out.special(c.eos);
    } else {
      refuse(c, i, kUserAndAssistantAfterSystem);
    }
  }
}

const char* const kMistralIds = "Tool call IDs should be alphanumeric strings with length 9!";

// Python's len() of a string: its code points.
size_t code_points(const std::string& s) {
  size_t n = 0;
  for (char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n;
}

// [AVAILABLE_TOOLS] [...]: each tool's function written key by key ("return" left out), a string
// value between quotes as it is (not escaped), any other value through tojson.
void write_mistral_tools(const Conversation& c, Pieces& out) {
  out.special("[AVAILABLE_TOOLS] [");
  for (size_t t = 0; t < c.tools.size(); ++t) {
    out.special("{\"type\": \"function\", \"function\": {");
    bool first = true;
    for (const auto& item : c.tools[t].at("function").items()) {
      if (item.key() == "return") continue;
      if (!first) out.special(", ");
      first = false;
      out.special("\"");
      out.text(item.key());
      if (item.value().is_string()) {
        out.special("\": \"");
        out.text(item.value().get<std::string>());
        out.special("\"");
      } else {
        out.special("\": ");
        out.text(python_json(item.value()));
      }
    }
    out.special(t + 1 == c.tools.size() ? "}}]" : "}}, ");
  }
  out.special("[/AVAILABLE_TOOLS]");
}

// [TOOL_CALLS] [...]: each call's function through tojson, its closing brace replaced by its id.
void write_mistral_calls(const Conversation& c, size_t i, Pieces& out) {
  const ChatMessage& m = c.messages[i];
  out.special("[TOOL_CALLS] [");
  for (size_t k = 0; k < m.tool_calls.size(); ++k) {
    const ChatToolCall& call = m.tool_calls[k];
    std::string function = python_json({{"name", call.name}, {"arguments", arguments_of(call)}});
    function.pop_back();
    out.text(function);
    if (code_points(call.id) != 9) refuse(c, i, kMistralIds);
    out.special(", \"id\": \"");
    out.text(call.id);
    out.special(k + 1 == m.tool_calls.size() ? "\"}]" + c.eos : std::string("\"}, "));
  }
}

// [TOOL_RESULTS] {"content": CONTENT, "call_id": "ID"}[/TOOL_RESULTS], the content as it is.
void write_mistral_tool_result(const Conversation& c, size_t i, Pieces& out) {
  const ChatMessage& m = c.messages[i];
  out.special("[TOOL_RESULTS] {\"content\": ");
  out.text(m.content);
  out.special(", ");
  if (code_points(m.tool_call_id) != 9) refuse(c, i, kMistralIds);
  out.special("\"call_id\": \"");
  out.text(m.tool_call_id);
  out.special("\"}[/TOOL_RESULTS]");
}

// v0.3: the whole conversation is checked first (tool calls and results aside); the system message
// opens the LAST message when that is a user message, and is written nowhere otherwise; answers are
// trimmed. The tools open every user message equal to the last one.
void render_mistral_v03(const Conversation& c, Pieces& out) {
  const bool has_system = opens_with_system(c);
  const size_t first = has_system ? 1 : 0;
  const ChatMessage* last_user = nullptr;
  for (size_t i = first, k = 0; i < c.messages.size(); ++i) {
    const ChatMessage& m = c.messages[i];
    if (m.role == "user") last_user = &m;
    if (m.role != "tool" && !calls_tools(m)) require_alternation(c, i, k++, kAlternateAfterSystem);
  }
  out.special(c.bos);
  for (size_t i = first; i < c.messages.size(); ++i) {
    const ChatMessage& m = c.messages[i];
    if (m.role == "user") {  // "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]"
      if (has_tools(c) && m.content == last_user->content) write_mistral_tools(c, out);
      out.special("[INST] ");
      if (is_last(c, i) && has_system) {
        out.text(c.messages.front().content);
        out.special("\n\n");
      }
      out.text(m.content);
      out.special("[/INST]");
    } else if (calls_tools(m)) {
      write_mistral_calls(c, i, out);
    } else if (m.role == "assistant") {  // " " + message["content"]|trim + eos_token
      out.special(" ");
      out.text(utf8::python_strip(m.content));
      out.special(c.eos);
    } else if (m.role == "tool") {
      write_mistral_tool_result(c, i, out);
    } else {
      refuse(c, i, kUserAndAssistantAfterSystem);
    }
  }
}

// ---- Zephyr --------------------------------------------------------------------------------------

// {{ '<|user|>\n' + message['content'] + eos_token }} and a newline: trim_blocks removes the
// newline after each {% %} line, not the one after a {{ }} line.
void render_zephyr(const Conversation& c, Pieces& out) {
  for (size_t i = 0; i < c.messages.size(); ++i) {
    const ChatMessage& m = c.messages[i];
    out.special("<|" + m.role + "|>\n");
    out.text(m.content);
    out.special(c.eos + "\n");
    if (is_last(c, i) && c.add_generation_prompt) out.special("<|assistant|>\n");
  }
}

// ---- Gemma ---------------------------------------------------------------------------------------

const char* gemma_role(const ChatMessage& m) { return m.role == "assistant" ? "model" : m.role.c_str(); }

// Gemma and Gemma 2: no system message; content | trim.
void render_gemma(const Conversation& c, Pieces& out) {
  out.special(c.bos);
  if (opens_with_system(c)) refuse(c, 0, "System role not supported");
  for (size_t i = 0; i < c.messages.size(); ++i) {
    require_alternation(c, i, i, kAlternate);
    out.special(std::string("<start_of_turn>") + gemma_role(c.messages[i]) + "\n");
    out.text(utf8::python_strip(c.messages[i].content));
    out.special("<end_of_turn>\n");
  }
  if (c.add_generation_prompt) out.special("<start_of_turn>model\n");
}

// Gemma 3: the system message, untrimmed and followed by "\n\n", opens the first turn.
void render_gemma3(const Conversation& c, Pieces& out) {
  const bool has_system = opens_with_system(c);
  out.special(c.bos);
  for (size_t i = has_system ? 1 : 0, k = 0; i < c.messages.size(); ++i, ++k) {
    require_alternation(c, i, k, kAlternate);
    out.special(std::string("<start_of_turn>") + gemma_role(c.messages[i]) + "\n");
    if (k == 0 && has_system) {  // first_user_prefix = messages[0]['content'] + '\n\n'
      out.text(c.messages.front().content);
      out.special("\n\n");
    }
    out.text(utf8::python_strip(c.messages[i].content));
    out.special("<end_of_turn>\n");
  }
  if (c.add_generation_prompt) out.special("<start_of_turn>model\n");
}

// ---- Phi-3 ---------------------------------------------------------------------------------------

// Phi-3-mini and Phi-3.5-mini: '<|' + role + '|>\n' + content + '<|end|>\n', then the assistant's
// header or, without the generation prompt, eos_token. Phi-3.5 skips an empty system message.
void render_phi3_roles(const Conversation& c, bool skip_empty_system, Pieces& out) {
  for (const ChatMessage& m : c.messages) {
    if (skip_empty_system && m.role == "system" && m.content.empty()) continue;
    out.special("<|" + m.role + "|>\n");
    out.text(m.content);
    out.special("<|end|>\n");
  }
  out.special(c.add_generation_prompt ? std::string("<|assistant|>\n") : c.eos);
}

void render_phi3(const Conversation& c, Pieces& out) { render_phi3_roles(c, false, out); }
void render_phi35(const Conversation& c, Pieces& out) { render_phi3_roles(c, true, out); }

// Phi-3-mini's first release: a user message always opens the assistant's turn; no system.
void render_phi3_2024_04(const Conversation& c, Pieces& out) {
  out.special(c.bos);
  for (const ChatMessage& m : c.messages) {
    if (m.role == "user") {
      out.special("<|user|>\n");
      out.text(m.content);
      out.special("<|end|>\n<|assistant|>\n");
    } else if (m.role == "assistant") {
      out.text(m.content);
      out.special("<|end|>\n");
    }
  }
}


// The default system message of a ChatML template: the text of a constant
// '<|im_start|>system\n...<|im_end|>\n'; empty when there is none.
std::string default_system_of(const JinjaNormalForm& n) {
  const std::string head = "<|im_start|>system\n", tail = "<|im_end|>\n";
  for (const std::string& s : n.literals) {
    if (s.size() > head.size() + tail.size() && s.compare(0, head.size(), head) == 0 &&
        s.compare(s.size() - tail.size(), tail.size(), tail) == 0) {
      return s.substr(head.size(), s.size() - head.size() - tail.size());
    }
  }
  return "";
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); !from.empty() && at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
}

// The template's first 60 characters on one line, for an error message.
std::string excerpt(const std::string& text) {
  std::string out;
  size_t pos = 0;
  for (int characters = 0; pos < text.size() && characters < 60; ++characters) {
    size_t length = 0;
    const uint32_t c = utf8::decode_at(text, pos, &length);
    const bool invalid = c == 0xFFFD && length == 1;
    out += c == '\n' ? std::string("\\n") : c < 0x20 || invalid ? std::string(" ") : text.substr(pos, length);
    pos += length;
  }
  if (text.empty()) return "empty";
  return pos < text.size() ? out + "..." : out;
}

std::string today_local() {  // strftime("%d %b %Y") in the C locale
  static const char* const kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char day[8];
  std::snprintf(day, sizeof(day), "%02d", local.tm_mday);
  return std::string(day) + " " + kMonths[local.tm_mon] + " " + std::to_string(local.tm_year + 1900);
}

const std::vector<ChatTemplate::Variant>& known_variants();

}  // namespace

// One published template: its text and the function that renders it.
struct ChatTemplate::Variant {
  const char* name;    // ChatTemplate::variant()
  const char* family;  // ChatTemplate::name()
  const char* text;
  void (*render)(const Conversation&, Pieces&);
  bool tools;  // renders tools, tool calls and tool messages
};

namespace {

// The normal form of each known template and its default system message, made once.
struct KnownForm {
  const ChatTemplate::Variant* variant;
  JinjaNormalForm normal;
  std::string default_system;
};

const std::vector<KnownForm>& known_forms() {
  static const std::vector<KnownForm> forms = [] {
    std::vector<KnownForm> out;
    for (const ChatTemplate::Variant& v : known_variants()) {
      JinjaNormalForm n = jinja_normal_form(v.text);
      const std::string system = default_system_of(n);
      out.push_back({&v, std::move(n), system});
    }
    return out;
  }();
  return forms;
}

// --chat-template NAME: the template each name renders.
const char* const kNamed[][2] = {{"chatml", "chatml"}, {"llama2", "llama2"},  {"llama3", "llama3"},
                                 {"mistral", "mistral-v0.2"}, {"zephyr", "zephyr"}, {"gemma", "gemma3"},
                                 {"phi3", "phi3"}};

std::string joined_names() {
  std::string out;
  for (const auto& entry : kNamed) out += std::string(out.empty() ? "" : ", ") + entry[0];
  return out;
}

}  // namespace

ChatTemplate::ChatTemplate(const Variant& variant, std::string bos, std::string eos, std::string default_system)
    : published_(&variant),
      family_(variant.family),
      variant_(variant.name),
      bos_(std::move(bos)),
      eos_(std::move(eos)),
      default_system_(std::move(default_system)),
      today_() {}

ChatTemplate ChatTemplate::from_text(const std::string& template_text, const std::string& bos_token,
                                     const std::string& eos_token) {
  const JinjaNormalForm n = jinja_normal_form(template_text);
  const std::string system = default_system_of(n);
  for (const KnownForm& known : known_forms()) {
    std::string form = n.form;
    if (!known.default_system.empty()) {  // the one part that may differ: read, not compared
      if (system.empty()) continue;
      replace_all(form, jinja_escaped(system), jinja_escaped(known.default_system));
    }
    if (form == known.normal.form) {
      return ChatTemplate(*known.variant, bos_token, eos_token, known.default_system.empty() ? "" : system);
    }
  }
  fail("chat template not recognised (", excerpt(template_text), "); choose one with --chat-template NAME (",
       joined_names(), ")");
}

ChatTemplate ChatTemplate::named(const std::string& name, const std::string& bos_token, const std::string& eos_token) {
  for (const auto& entry : kNamed) {
    if (name != entry[0]) continue;
    for (const Variant& v : known_variants()) {
      if (std::string(v.name) == entry[1]) return ChatTemplate(v, bos_token, eos_token, "");
    }
  }
  fail("unknown chat template \"", name, "\"; choose one of: ", joined_names());
}

std::vector<std::string> ChatTemplate::names() {
  std::vector<std::string> out;
  for (const auto& entry : kNamed) out.push_back(entry[0]);
  return out;
}

bool ChatTemplate::renders_tools() const { return published_->tools; }

namespace {

// The tools' JSON texts parsed, each an object with a "function" object.
std::vector<nlohmann::ordered_json> parsed_tools(const std::vector<std::string>& tools) {
  std::vector<nlohmann::ordered_json> out;
  for (size_t t = 0; t < tools.size(); ++t) {
    nlohmann::ordered_json tool;
    try {
      tool = nlohmann::ordered_json::parse(tools[t]);
    } catch (const nlohmann::json::exception&) {
      fail("tool ", t + 1, " is not JSON");
    }
    MINFER_CHECK(tool.is_object() && tool.contains("function") && tool["function"].is_object(), "tool ", t + 1,
                 " is not an object with a \"function\" object");
    out.push_back(std::move(tool));
  }
  return out;
}

}  // namespace

std::vector<ChatPiece> ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                            const std::vector<std::string>& tools) const {
  MINFER_CHECK(!messages.empty(), "chat template ", variant_, ": the conversation has no messages");
  const bool tool_roles = renders_tools();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    MINFER_CHECK(role == "system" || role == "user" || role == "assistant" || (role == "tool" && tool_roles),
                 "chat message ", i + 1, " has role \"", role, "\"; chat template ", variant_, " takes system, user",
                 tool_roles ? ", assistant and tool messages" : " and assistant messages (it does not render tools)");
    MINFER_CHECK(messages[i].tool_calls.empty() || tool_roles, "chat message ", i + 1,
                 " has tool calls; chat template ", variant_, " does not render tools");
  }
  MINFER_CHECK(tools.empty() || tool_roles, "chat template ", variant_, " does not render tools");
  const std::vector<nlohmann::ordered_json> parsed = parsed_tools(tools);
  // strftime_now is read at every rendering, as jinja2 calls it (a server runs for days).
  const std::string today = today_.empty() ? today_local() : today_;
  const Conversation c{messages, add_generation_prompt, bos_, eos_, default_system_, today, variant_, parsed};
  Pieces out;
  published_->render(c, out);
  return out.take();
}

std::string ChatTemplate::render_text(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                      const std::vector<std::string>& tools) const {
  std::string out;
  for (const ChatPiece& piece : render(messages, add_generation_prompt, tools)) out += piece.text;
  return out;
}

std::vector<std::string> ChatTemplate::end_of_turn() const {
  if (family_ == "chatml") return {"<|im_end|>"};
  if (family_ == "llama3") return {"<|eot_id|>"};
  if (family_ == "gemma") return {"<end_of_turn>"};
  if (family_ == "phi3") return {"<|end|>"};
  if (eos_.empty()) return {};
  return {eos_};  // llama2, mistral, zephyr
}

// ---- The published templates (tokenizers/chat_template_texts.h) ---------------------------------

namespace {

const std::vector<ChatTemplate::Variant>& known_variants() {
  static const std::vector<ChatTemplate::Variant> variants = {
      {"chatml", "chatml", published_templates::kChatml, render_chatml, false},
      {"chatml-default-system", "chatml", published_templates::kChatmlDefaultSystem, render_chatml, false},
      {"qwen2.5", "chatml", published_templates::kQwen25, render_qwen25, true},
      {"llama2", "llama2", published_templates::kLlama2, render_llama2, false},
      {"llama3", "llama3", published_templates::kLlama3, render_llama3, false},
      {"llama3.1", "llama3", published_templates::kLlama31, render_llama31, true},
      {"llama3.2", "llama3", published_templates::kLlama32, render_llama32, true},
      {"mistral-v0.1", "mistral", published_templates::kMistralV01, render_mistral_v01, false},
      {"mistral-v0.2", "mistral", published_templates::kMistralV02, render_mistral_v02, false},
      {"mistral-v0.1-rev2024", "mistral", published_templates::kMistralV01Rev2024, render_mistral_v01_rev2024, false},
      {"mistral-v0.3", "mistral", published_templates::kMistralV03, render_mistral_v03, true},
      {"zephyr", "zephyr", published_templates::kZephyr, render_zephyr, false},
      {"gemma", "gemma", published_templates::kGemma, render_gemma, false},
      {"gemma3", "gemma", published_templates::kGemma3, render_gemma3, false},
      {"phi3", "phi3", published_templates::kPhi3, render_phi3, false},
      {"phi3.5", "phi3", published_templates::kPhi35, render_phi35, false},
      {"phi3-2024-04", "phi3", published_templates::kPhi3April2024, render_phi3_2024_04, false},
  };
  return variants;
}

}  // namespace
}  // namespace minfer
