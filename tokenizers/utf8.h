// UTF-8 as the tokenizers need it: character boundaries in text that may be invalid, Unicode
// white space, and Rust's String::from_utf8_lossy (the tokenizers library's decoders use it, so
// decode() must replace invalid bytes exactly as it does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace minfer::utf8 {

// The length of the character whose first byte is `lead`, as llama.cpp's unicode_len_utf8 counts
// it (an invalid lead byte counts as a 1-byte character); callers clamp it to what is left.
inline size_t char_length(unsigned char lead) {
  static const uint8_t by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return by_high_nibble[lead >> 4];
}

// The code point at text[pos] and its length, or (0xFFFD, 1) when the bytes there are not a
// valid UTF-8 character.
uint32_t decode_at(const std::string& text, size_t pos, size_t* length);
void append(std::string& out, uint32_t code_point);
std::string encode(uint32_t code_point);

// How many bytes of a valid UTF-8 character start at text[pos] (0 if none): the validity rules of
// the Unicode standard (no overlong forms, no surrogates, nothing above U+10FFFF).
size_t valid_char_length(const char* text, size_t size);
bool is_valid(const std::string& text);
// The bytes at the end of `text` that begin a valid character but do not finish it (0 to 3).
size_t unfinished_tail(const std::string& text);

// Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes one U+FFFD.
std::string lossy(const std::string& bytes);

// Unicode's White_Space property (Rust's char::is_whitespace).
bool is_whitespace(uint32_t code_point);

// Python's str.isspace() and str.strip(), as jinja2's templates use them (trim, .strip()):
// U+200B, zero width space, is not white space there; invalid UTF-8 is not white space.
bool is_python_space(uint32_t code_point);
size_t python_leading_space(const std::string& s);        // the length of the white space that starts s
size_t python_trailing_space_start(const std::string& s);  // where the white space that ends s begins
std::string python_strip(const std::string& s);

}  // namespace minfer::utf8
