// JSON text as Python's json.dumps writes it, for the chat templates' tojson filter.
//
// transformers replaces jinja2's tojson by json.dumps(x, ensure_ascii=False, indent=indent,
// separators=separators, sort_keys=False), so a template that writes a tool's schema writes it
// this way: keys in the order given, ", " and ": " between items (or "," and ": " with an indent,
// each item on a line of its own), non-ASCII characters as they are, and numbers as Python prints
// them (a float always with a dot or an exponent: 10.0, 1e-05, 1e+16). nlohmann's dump differs in
// each of these, so the templates' renderings (tokenizers/chat_template.cpp) write through this.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace minfer {

// json.dumps(value, ensure_ascii=False, indent=indent or None when indent < 0). The value is
// walked recursively: its depth is the caller's to bound (the server refuses deeper bodies).
std::string python_json(const nlohmann::ordered_json& value, int indent = -1);

// repr(x) of a finite Python float: the shortest digits that read back as x, in fixed notation
// for exponents -4 to 15 ("0.0001", "123.0") and scientific otherwise ("1e-05", "1.5e+16").
std::string python_float(double x);

}  // namespace minfer
