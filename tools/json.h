// The two JSON spellings the bench and the demos write by hand: a quoted, escaped string and a
// number (null when not finite).
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace minfer::cli {

inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      out += escaped;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char text[40];
  std::snprintf(text, sizeof(text), "%.6g", v);
  return text;
}

}  // namespace minfer::cli
