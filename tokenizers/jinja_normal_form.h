// The normal form of a Jinja template, by which minfer recognises a chat template
// (tokenizers/chat_template.h). Two template texts render the same when they differ only in
// layout: the white space inside tags, the quote characters, how a string literal is escaped or
// split ('<|im_end|>' + '\n'), `a.b` for a['b'], and the white space around tags that Jinja's
// markers ({%-, -%}) and transformers' trim_blocks and lstrip_blocks remove. The normal form
// erases exactly those differences: it lexes the template as jinja2 does, applies jinja2's
// white-space rules to the text between tags, and writes each tag as its tokens one space apart,
// literals decoded and quoted one way. Anything else (a changed word, another branch) stays, so
// two templates with equal normal forms render alike and a template edited in any way that
// changes its output has another normal form.
#pragma once

#include <string>
#include <vector>

namespace minfer {

struct JinjaNormalForm {
  std::string form;
  std::vector<std::string> literals;  // the values of its string literals, in order
};

// Never throws: a text that is not valid Jinja still has a form (which matches no template).
JinjaNormalForm jinja_normal_form(const std::string& template_text);
// `value` as the normal form writes it inside a literal quoted with '.
std::string jinja_escaped(const std::string& value);

}  // namespace minfer
