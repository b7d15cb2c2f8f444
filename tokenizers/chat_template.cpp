// Chat templates rendered in code, each function beside the Jinja it mirrors. Why there is no
// Jinja interpreter, and why the rendering comes as pieces, is told in chat_template.h.
//
// Recognising a template. Two template texts render the same when they differ only in layout: the
// white space inside tags, the quote characters, how a string literal is escaped or split
// ('<|im_end|>' + '\n'), `a.b` for a['b'], and the white space around tags that Jinja's markers
// ({%-, -%}) and transformers' trim_blocks and lstrip_blocks remove. normal_form() erases exactly
// those differences: it lexes the template as jinja2 does, applies jinja2's white-space rules to
// the text between tags, and writes each tag as its tokens one space apart, literals decoded and
// quoted one way. A
// template is recognised when its normal form equals that of a published template minfer renders
// (the texts at the end of this file, copied from tests/data/chat_templates/templates/), so a
// template edited in any way that changes its output is refused, never rendered wrongly. One
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

#include "core/error.h"
#include "tokenizers/chat_template_texts.h"
#include "tokenizers/utf8.h"

namespace minfer {
namespace {

// ---- Python's str.strip() over UTF-8 ---------------------------------------------------------

// str.isspace(): the characters Python's strip() removes (U+200B, zero width space, is not one).
bool is_python_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// The length of the white space that starts `s` (invalid UTF-8 is not white space).
size_t leading_space(const std::string& s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t length = 0;
    if (!is_python_space(utf8::decode_at(s, pos, &length))) break;
    pos += length;
  }
  return pos;
}

// Where the white space that ends `s` begins.
size_t trailing_space_start(const std::string& s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t length = 0;
    const uint32_t c = utf8::decode_at(s, start, &length);
    if (start + length != end || !is_python_space(c)) break;
    end = start;
  }
  return end;
}

std::string strip(const std::string& s) {
  const size_t begin = leading_space(s), end = trailing_space_start(s);
  return begin < end ? s.substr(begin, end - begin) : std::string();
}

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
      first.erase(0, leading_space(first));
      if (!first.empty()) break;
      pieces_.erase(pieces_.begin());
    }
    while (!pieces_.empty()) {
      std::string& last = pieces_.back().text;
      last.resize(trailing_space_start(last));
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

// ---- ChatML: SmolLM2, Qwen2, Qwen2.5, OpenHermes -------------------------------------------------

// {% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}
// {{ '<|im_start|>system\nDEFAULT<|im_end|>\n' }}{% endif %}
// {{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}
// {% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
// Qwen2.5 writes the same (its tool branches aside): its first system message, or the default.
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
  out.text(strip(m.content));
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
// before the (trimmed) system message, which may be empty.
void render_llama3_dated(const Conversation& c, const std::string& date, Pieces& out) {
  const bool has_system = opens_with_system(c);
  out.special(c.bos + "<|start_header_id|>system<|end_header_id|>\n\n" +
              "Cutting Knowledge Date: December 2023\nToday Date: " + date + "\n\n");
  if (has_system) out.text(strip(c.messages.front().content));
  out.special("<|eot_id|>");
  for (size_t i = has_system ? 1 : 0; i < c.messages.size(); ++i) write_llama3_message(c.messages[i], out);
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

// v0.3: the whole conversation is checked first; the system message opens the LAST message when
// that is a user message, and is written nowhere otherwise; answers are trimmed.
void render_mistral_v03(const Conversation& c, Pieces& out) {
  const bool has_system = opens_with_system(c);
  const size_t first = has_system ? 1 : 0;
  for (size_t i = first; i < c.messages.size(); ++i) require_alternation(c, i, i - first, kAlternateAfterSystem);
  out.special(c.bos);
  for (size_t i = first; i < c.messages.size(); ++i) {
    const ChatMessage& m = c.messages[i];
    if (m.role == "user") {  // "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]"
      out.special("[INST] ");
      if (is_last(c, i) && has_system) {
        out.text(c.messages.front().content);
        out.special("\n\n");
      }
      out.text(m.content);
      out.special("[/INST]");
    } else if (m.role == "assistant") {  // " " + message["content"]|trim + eos_token
      out.special(" ");
      out.text(strip(m.content));
      out.special(c.eos);
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
    out.text(strip(c.messages[i].content));
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
    out.text(strip(c.messages[i].content));
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

// ---- The normal form of a template ---------------------------------------------------------------

enum class TokenKind { text, expression, statement, comment };  // text, {{ }}, {% %}, {# #}

struct JinjaToken {
  TokenKind kind;
  std::string body;          // the text, or what is between the tag's delimiters
  char left = 0, right = 0;  // '-', '+' or 0 just inside the tag's delimiters
};

// The end (one past the closing quote) of the string literal whose opening quote is s[pos]; its
// undecoded text goes to *raw.
size_t read_literal(const std::string& s, size_t pos, std::string* raw) {
  const char quote = s[pos];
  size_t i = pos + 1;
  while (i < s.size() && s[i] != quote) i += (s[i] == '\\' && i + 1 < s.size()) ? 2 : 1;
  const size_t end = i < s.size() ? i : s.size();
  if (raw) *raw = s.substr(pos + 1, end - pos - 1);
  return end < s.size() ? end + 1 : end;
}

int hex_value(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

// A literal's value, as jinja2 decodes it (Python's unicode-escape: an escape Python does not know
// keeps its backslash); false for an escape Python refuses (a short \x, \u or \U, or \N, which
// minfer does not decode).
bool unescape(const std::string& raw, std::string& out) {
  static const std::string kSimple = "nrtabfv\\'\"", kValue = "\n\r\t\a\b\f\v\\'\"";
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\' || i + 1 == raw.size()) {
      out += raw[i];
      continue;
    }
    const char e = raw[++i];
    const size_t simple = kSimple.find(e);
    const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    uint32_t code = 0;
    size_t n = 0;
    while (n < digits && i + 1 + n < raw.size() && hex_value(raw[i + 1 + n]) >= 0) {
      code = code * 16 + static_cast<uint32_t>(hex_value(raw[i + 1 + n++]));
    }
    if (simple != std::string::npos) {
      out += kValue[simple];
    } else if (e >= '0' && e <= '7') {  // up to three octal digits
      code = static_cast<uint32_t>(e - '0');
      for (int k = 0; k < 2 && i + 1 < raw.size() && raw[i + 1] >= '0' && raw[i + 1] <= '7'; ++k) {
        code = code * 8 + static_cast<uint32_t>(raw[++i] - '0');
      }
      utf8::append(out, code);
    } else if (digits) {
      if (n < digits || code > 0x10FFFF) return false;
      utf8::append(out, code);
      i += digits;
    } else if (e == 'N') {
      return false;
    } else if (e != '\n') {  // a backslash before a newline continues the line
      out += '\\';
      out += e;
    }
  }
  return true;
}

std::string escaped(const std::string& value) {  // for a literal quoted with '
  std::string out;
  for (char ch : value) {
    if (ch == '\\' || ch == '\'') out += '\\';
    out += ch == '\n' ? std::string("\\n") : ch == '\t' ? std::string("\\t") : ch == '\r' ? std::string("\\r")
                                                                                        : std::string(1, ch);
  }
  return out;
}

size_t find_tag(const std::string& s, size_t from) {
  for (size_t i = from; i + 1 < s.size(); ++i) {
    if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')) return i;
  }
  return std::string::npos;
}

// The template as text and tags.
std::vector<JinjaToken> lex(const std::string& src) {
  std::vector<JinjaToken> tokens;
  size_t pos = 0;
  while (pos < src.size()) {
    const size_t open = find_tag(src, pos);
    if (open != pos) tokens.push_back({TokenKind::text, src.substr(pos, open - pos)});
    if (open == std::string::npos) break;
    const char opener = src[open + 1];
    JinjaToken tag{opener == '{' ? TokenKind::expression : opener == '%' ? TokenKind::statement : TokenKind::comment,
                   ""};
    const char closer = opener == '{' ? '}' : opener;
    size_t i = open + 2;
    if (i < src.size() && (src[i] == '-' || src[i] == '+')) tag.left = src[i++];
    const size_t body_begin = i;
    while (i < src.size() && !(src[i] == closer && i + 1 < src.size() && src[i + 1] == '}')) {
      const bool quote = src[i] == '\'' || src[i] == '"';
      i = quote && tag.kind != TokenKind::comment ? read_literal(src, i, nullptr) : i + 1;
    }
    if (i >= src.size()) {  // never closed: jinja2 refuses the template, and it matches nothing here
      tokens.push_back({TokenKind::text, src.substr(open)});
      break;
    }
    size_t body_end = i;  // '+' marks the end of {% %} and {# #} only
    const char marker = body_end > body_begin ? src[body_end - 1] : 0;
    if (marker == '-' || (marker == '+' && tag.kind != TokenKind::expression)) tag.right = src[--body_end];
    tag.body = src.substr(body_begin, body_end - body_begin);
    tokens.push_back(tag);
    pos = i + 2;
  }
  return tokens;
}

// lstrip_blocks: the spaces between the start of a line and a {% or {# tag go.
void strip_indent(std::string& text, bool line_starting) {
  const size_t newline = text.rfind('\n');
  const size_t line = newline == std::string::npos ? 0 : newline + 1;
  if ((line > 0 || line_starting) && line < text.size() && line + leading_space(text.substr(line)) == text.size()) {
    text.erase(line);
  }
}

// What jinja2's lexer removes from the text around tags: all white space beside a '-' marker;
// with trim_blocks, the newline right after a {% %} or {# #} tag; with lstrip_blocks, a {% %} or
// {# #} tag's indentation (unless marked '+'). "line_starting" follows jinja2's lexer: whether the
// previous tag's match ended with a newline, so that the text after it starts a line.
void apply_whitespace_control(std::vector<JinjaToken>& tokens) {
  bool line_starting = true;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const JinjaToken& tag = tokens[i];
    if (tag.kind == TokenKind::text) continue;
    const bool block = tag.kind != TokenKind::expression;
    if (i > 0 && tokens[i - 1].kind == TokenKind::text) {
      std::string& before = tokens[i - 1].body;
      if (tag.left == '-') {
        before.resize(trailing_space_start(before));
      } else if (block && tag.left != '+') {
        strip_indent(before, line_starting);
      }
    }
    std::string swallowed;
    if (i + 1 < tokens.size() && tokens[i + 1].kind == TokenKind::text) {
      std::string& after = tokens[i + 1].body;
      size_t n = 0;
      if (tag.right == '-') {
        n = leading_space(after);
      } else if (block && tag.right != '+' && !after.empty() && after[0] == '\n') {
        n = 1;
      }
      swallowed = after.substr(0, n);
      after.erase(0, n);
    }
    line_starting = !swallowed.empty() && swallowed.back() == '\n';
  }
}

struct BodyToken {
  std::string text;  // a literal's value, a word, or one other character
  bool literal;
};

bool is_word_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}
bool is_word(const BodyToken& t) { return !t.literal && is_word_char(t.text[0]); }
bool is_name(const BodyToken& t) { return is_word(t) && !(t.text[0] >= '0' && t.text[0] <= '9'); }
bool is(const BodyToken& t, const char* s) { return !t.literal && t.text == s; }

bool is_two_char_operator(const std::string& s) {
  return s == "==" || s == "!=" || s == "<=" || s == ">=" || s == "//" || s == "**";
}

// A tag's body as jinja2's lexer splits it: names, numbers, literals, operators.
std::vector<BodyToken> split_body(const std::string& body) {
  std::vector<BodyToken> tokens;
  size_t i = 0;
  while (i < body.size()) {
    const char ch = body[i];
    if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v') {
      ++i;
    } else if (ch == '\'' || ch == '"') {
      std::string raw, value;
      i = read_literal(body, i, &raw);
      const bool valid = unescape(raw, value);
      tokens.push_back(valid ? BodyToken{value, true} : BodyToken{"(an escape Python refuses)", false});
    } else {
      size_t j = i + 1;
      while (is_word_char(ch) && j < body.size() && is_word_char(body[j])) ++j;
      if (j == i + 1 && j < body.size() && is_two_char_operator(body.substr(i, 2))) ++j;
      tokens.push_back({body.substr(i, j - i), false});
      i = j;
    }
  }
  return tokens;
}

// a.b as a['b'] (not a method call a.b(...)).
void subscript_attributes(std::vector<BodyToken>& t) {
  for (size_t i = 1; i + 1 < t.size(); ++i) {
    const bool object = is_word(t[i - 1]) || is(t[i - 1], "]") || is(t[i - 1], ")");
    if (!object || !is(t[i], ".") || !is_name(t[i + 1]) || (i + 2 < t.size() && is(t[i + 2], "("))) continue;
    const std::string name = t[i + 1].text;
    t[i] = {"[", false};
    t[i + 1] = {name, true};
    t.insert(t.begin() + static_cast<std::ptrdiff_t>(i) + 2, {"]", false});
  }
}

// Whether t[i] binds no tighter than + to the literal beside it (before it, or after it).
bool loose(const std::vector<BodyToken>& t, size_t i, bool before) {
  static const char* const kLooser[] = {"+", ",", ":", "==", "!=", "<", ">", "<=", ">="};
  if (is_word(t[i])) return true;
  for (const char* op : kLooser) {
    if (is(t[i], op)) return true;
  }
  return before ? is(t[i], "(") || is(t[i], "[") || is(t[i], "=") : is(t[i], ")") || is(t[i], "]") || is(t[i], "-");
}

// 'a' + 'b' as 'ab', where nothing binds tighter than + on either side.
void join_literals(std::vector<BodyToken>& t) {
  for (size_t i = 0; i + 2 < t.size();) {
    const bool loose_before = i == 0 || loose(t, i - 1, true);
    const bool loose_after = i + 3 == t.size() || loose(t, i + 3, false);
    if (t[i].literal && is(t[i + 1], "+") && t[i + 2].literal && loose_before && loose_after) {
      t[i].text += t[i + 2].text;
      t.erase(t.begin() + static_cast<std::ptrdiff_t>(i) + 1, t.begin() + static_cast<std::ptrdiff_t>(i) + 3);
    } else {
      ++i;
    }
  }
}

// A tag's body without its layout: its tokens, one space apart; its literals' values go to `literals`.
std::string squeeze(const std::string& body, std::vector<std::string>& literals) {
  std::vector<BodyToken> tokens = split_body(body);
  subscript_attributes(tokens);
  join_literals(tokens);
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out += ' ';
    if (tokens[i].literal) literals.push_back(tokens[i].text);
    out += tokens[i].literal ? "'" + escaped(tokens[i].text) + "'" : tokens[i].text;
  }
  return out;
}

struct NormalForm {
  std::string form;
  std::vector<std::string> literals;  // the values of its string literals, in order
};

NormalForm normal_form(const std::string& template_text) {
  std::string src;  // jinja2: newlines as "\n", and one trailing newline dropped
  for (size_t i = 0; i < template_text.size(); ++i) {
    if (template_text[i] != '\r') {
      src += template_text[i];
    } else if (i + 1 == template_text.size() || template_text[i + 1] != '\n') {
      src += '\n';
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  std::vector<JinjaToken> tokens = lex(src);
  apply_whitespace_control(tokens);
  NormalForm n;
  for (const JinjaToken& t : tokens) {
    if (t.kind == TokenKind::text && !t.body.empty()) n.form += "\xC2\xAB" + escaped(t.body) + "\xC2\xBB";
    if (t.kind == TokenKind::expression) n.form += "{{" + squeeze(t.body, n.literals) + "}}";
    if (t.kind == TokenKind::statement) n.form += "{%" + squeeze(t.body, n.literals) + "%}";
  }
  // transformers always passes add_generation_prompt, so this default never applies.
  const std::string unused_default =
      "{%if not add_generation_prompt is defined%}{%set add_generation_prompt = false%}{%endif%}";
  const size_t at = n.form.find(unused_default);
  if (at != std::string::npos) n.form.erase(at, unused_default.size());
  return n;
}

// The default system message of a ChatML template: the text of a constant
// '<|im_start|>system\n...<|im_end|>\n'; empty when there is none.
std::string default_system_of(const NormalForm& n) {
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
};

namespace {

// The normal form of each known template and its default system message, made once.
struct KnownForm {
  const ChatTemplate::Variant* variant;
  NormalForm normal;
  std::string default_system;
};

const std::vector<KnownForm>& known_forms() {
  static const std::vector<KnownForm> forms = [] {
    std::vector<KnownForm> out;
    for (const ChatTemplate::Variant& v : known_variants()) {
      NormalForm n = normal_form(v.text);
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
  const NormalForm n = normal_form(template_text);
  const std::string system = default_system_of(n);
  for (const KnownForm& known : known_forms()) {
    std::string form = n.form;
    if (!known.default_system.empty()) {  // the one part that may differ: read, not compared
      if (system.empty()) continue;
      replace_all(form, escaped(system), escaped(known.default_system));
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

std::vector<ChatPiece> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                            bool add_generation_prompt) const {
  MINFER_CHECK(!messages.empty(), "chat template ", variant_, ": the conversation has no messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    MINFER_CHECK(role == "system" || role == "user" || role == "assistant", "chat message ", i + 1, " has role \"",
                 role, "\"; minfer's chat templates take system, user and assistant messages");
  }
  // strftime_now is read at every rendering, as jinja2 calls it (a server runs for days).
  const std::string today = today_.empty() ? today_local() : today_;
  const Conversation c{messages, add_generation_prompt, bos_, eos_, default_system_, today, variant_};
  Pieces out;
  published_->render(c, out);
  return out.take();
}

std::string ChatTemplate::render_text(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  std::string out;
  for (const ChatPiece& piece : render(messages, add_generation_prompt)) out += piece.text;
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
      {"chatml", "chatml", published_templates::kChatml, render_chatml},
      {"chatml-default-system", "chatml", published_templates::kChatmlDefaultSystem, render_chatml},
      {"qwen2.5", "chatml", published_templates::kQwen25, render_chatml},
      {"llama2", "llama2", published_templates::kLlama2, render_llama2},
      {"llama3", "llama3", published_templates::kLlama3, render_llama3},
      {"llama3.1", "llama3", published_templates::kLlama31, render_llama31},
      {"llama3.2", "llama3", published_templates::kLlama32, render_llama32},
      {"mistral-v0.1", "mistral", published_templates::kMistralV01, render_mistral_v01},
      {"mistral-v0.2", "mistral", published_templates::kMistralV02, render_mistral_v02},
      {"mistral-v0.1-rev2024", "mistral", published_templates::kMistralV01Rev2024, render_mistral_v01_rev2024},
      {"mistral-v0.3", "mistral", published_templates::kMistralV03, render_mistral_v03},
      {"zephyr", "zephyr", published_templates::kZephyr, render_zephyr},
      {"gemma", "gemma", published_templates::kGemma, render_gemma},
      {"gemma3", "gemma", published_templates::kGemma3, render_gemma3},
      {"phi3", "phi3", published_templates::kPhi3, render_phi3},
      {"phi3.5", "phi3", published_templates::kPhi35, render_phi35},
      {"phi3-2024-04", "phi3", published_templates::kPhi3April2024, render_phi3_2024_04},
  };
  return variants;
}

}  // namespace
}  // namespace minfer
