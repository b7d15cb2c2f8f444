#include "tokenizers/utf8.h"

namespace minfer::utf8 {

namespace {

// Checks the character at p (n bytes available). Returns its length if it is a whole valid
// character; otherwise 0, with *prefix = the length of the longest prefix of p that could still
// begin a valid character (at least 1 when the first byte cannot), which is what one U+FFFD
// replaces in from_utf8_lossy and what a stream may still complete.
size_t check(const unsigned char* p, size_t n, size_t* prefix) {
  const unsigned char lead = p[0];
  size_t need;
  unsigned char low = 0x80, high = 0xBF;  // the range of the second byte
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    *prefix = 1;
    return 0;
  }
  size_t i = 1;
  for (; i < need && i < n; ++i) {
    const unsigned char lo = i == 1 ? low : 0x80, hi = i == 1 ? high : 0xBF;
    if (p[i] < lo || p[i] > hi) break;
  }
  if (i == need) return need;
  *prefix = i;
  return 0;
}

}  // namespace

size_t valid_char_length(const char* text, size_t size) {
  if (size == 0) return 0;
  size_t prefix = 0;
  return check(reinterpret_cast<const unsigned char*>(text), size, &prefix);
}

bool is_valid(const std::string& text) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = valid_char_length(text.data() + pos, text.size() - pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

size_t unfinished_tail(const std::string& text) {
  // A character is at most 4 bytes: its start is among the last 3 bytes if it is unfinished.
  const size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const unsigned char byte = static_cast<unsigned char>(text[n - back]);
    if ((byte & 0xC0) == 0x80) continue;  // a continuation byte: the start is further back
    size_t prefix = 0;
    const size_t whole = check(reinterpret_cast<const unsigned char*>(text.data() + n - back), back, &prefix);
    // Unfinished: not whole, and every byte present is a valid beginning of a longer character.
    return whole == 0 && prefix == back && char_length(byte) > back ? back : 0;
  }
  return 0;
}

uint32_t decode_at(const std::string& text, size_t pos, size_t* length) {
  const size_t n = valid_char_length(text.data() + pos, text.size() - pos);
  if (n == 0) {
    *length = 1;
    return 0xFFFD;
  }
  *length = n;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data() + pos);
  switch (n) {
    case 1: return p[0];
    case 2: return (uint32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    case 3: return (uint32_t(p[0] & 0x0F) << 12) | (uint32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    default:
      return (uint32_t(p[0] & 0x07) << 18) | (uint32_t(p[1] & 0x3F) << 12) | (uint32_t(p[2] & 0x3F) << 6) |
             (p[3] & 0x3F);
  }
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode(uint32_t code_point) {
  std::string out;
  append(out, code_point);
  return out;
}

std::string lossy(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  for (size_t pos = 0; pos < bytes.size();) {
    size_t prefix = 0;
    const size_t n = check(p + pos, bytes.size() - pos, &prefix);
    if (n > 0) {
      out.append(bytes, pos, n);
      pos += n;
    } else {
      out += "\xEF\xBF\xBD";
      pos += prefix;
    }
  }
  return out;
}

bool is_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool is_python_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

size_t python_leading_space(const std::string& s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t length = 0;
    if (!is_python_space(decode_at(s, pos, &length))) break;
    pos += length;
  }
  return pos;
}

size_t python_trailing_space_start(const std::string& s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t length = 0;
    const uint32_t c = decode_at(s, start, &length);
    if (start + length != end || !is_python_space(c)) break;
    end = start;
  }
  return end;
}

std::string python_strip(const std::string& s) {
  const size_t begin = python_leading_space(s), end = python_trailing_space_start(s);
  return begin < end ? s.substr(begin, end - begin) : std::string();
}

}  // namespace minfer::utf8
