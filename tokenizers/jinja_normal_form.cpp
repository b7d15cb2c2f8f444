// The normal form of a Jinja template: see tokenizers/jinja_normal_form.h.
#include "tokenizers/jinja_normal_form.h"

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "tokenizers/utf8.h"

namespace minfer {

namespace {
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
  if ((line > 0 || line_starting) && line < text.size() &&
      line + utf8::python_leading_space(text.substr(line)) == text.size()) {
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
        before.resize(utf8::python_trailing_space_start(before));
      } else if (block && tag.left != '+') {
        strip_indent(before, line_starting);
      }
    }
    std::string swallowed;
    if (i + 1 < tokens.size() && tokens[i + 1].kind == TokenKind::text) {
      std::string& after = tokens[i + 1].body;
      size_t n = 0;
      if (tag.right == '-') {
        n = utf8::python_leading_space(after);
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

}  // namespace

JinjaNormalForm jinja_normal_form(const std::string& template_text) {
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
  JinjaNormalForm n;
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

std::string jinja_escaped(const std::string& value) { return escaped(value); }

}  // namespace minfer
