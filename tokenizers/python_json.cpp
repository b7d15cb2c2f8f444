// Python's json.dumps and float repr, as tokenizers/python_json.h says.
#include "tokenizers/python_json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace minfer {
namespace {

// json.dumps' string escapes: the quote, the backslash, \n \r \t \b \f, other control characters
// as \u00XX (lowercase hex); everything else as it is (ensure_ascii=False).
void write_string(const std::string& s, std::string& out) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
          out += escaped;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void newline(int indent, int level, std::string& out) {
  if (indent < 0) return;
  out += '\n';
  out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
}

void write(const nlohmann::ordered_json& v, int indent, int level, std::string& out) {
  const char* const separator = indent < 0 ? ", " : ",";
  if (v.is_object() || v.is_array()) {
    const bool object = v.is_object();
    if (v.empty()) {
      out += object ? "{}" : "[]";
      return;
    }
    out += object ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += separator;
      first = false;
      newline(indent, level + 1, out);
      if (object) {
        write_string(it.key(), out);
        out += ": ";
      }
      write(it.value(), indent, level + 1, out);
    }
    newline(indent, level, out);
    out += object ? '}' : ']';
  } else if (v.is_string()) {
    write_string(v.get_ref<const std::string&>(), out);
  } else if (v.is_number_float()) {
    out += python_float(v.get<double>());
  } else {
    out += v.dump();  // null, true, false and integers read the same in both
  }
}

}  // namespace

std::string python_json(const nlohmann::ordered_json& value, int indent) {
  std::string out;
  write(value, indent, 0, out);
  return out;
}

std::string python_float(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  // The shortest %.*e that reads back as x: its digits and decimal exponent.
  char buffer[40];
  for (int precision = 0; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*e", precision, x);
    if (std::strtod(buffer, nullptr) == x) break;
  }
  const std::string e = buffer;
  const size_t at = e.find('e');
  const int exponent = std::atoi(e.c_str() + at + 1);
  const bool negative = e[0] == '-';
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < at; ++i) {
    if (e[i] != '.') digits += e[i];
  }
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char tail[16];
    std::snprintf(tail, sizeof(tail), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + tail;
  }
  if (exponent < 0) return out + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  const auto whole = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= whole) return out + digits + std::string(whole - digits.size(), '0') + ".0";
  return out + digits.substr(0, whole) + "." + digits.substr(whole);
}

}  // namespace minfer
