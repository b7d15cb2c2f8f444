// The regular expressions of pre-tokenizers (GPT-2's, Llama 3's, a tokenizer.json's Split), on
// PCRE2 in UTF mode with Unicode properties (\p{L}, \p{N}, \s as Unicode white space), JIT-compiled
// where the platform allows. Text that is not valid UTF-8 is still searched: invalid bytes never
// match (PCRE2_MATCH_INVALID_UTF), so they end up between matches.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace minfer {

class Regex {
 public:
  // `source` names what the pattern came from in errors ("tokenizer.json: pre_tokenizer Split").
  Regex(const std::string& pattern, const std::string& source);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_match(begin, end) with the [begin, end) byte ranges of the successive
  // non-overlapping leftmost matches in `text`, as the tokenizers library's find_iter yields
  // them, one at a time as they are found (nothing is kept of the ones before); empty matches are
  // skipped. on_match may run other matches (of this or another Regex) on the same thread.
  void for_each_match(const std::string& text, const std::function<void(size_t, size_t)>& on_match) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_, source_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// GPT-2's pre-tokenizer pattern (the tokenizers library's ByteLevel with use_regex).
extern const char* const kGpt2Pattern;
// Llama 3's Split pattern.
extern const char* const kLlama3Pattern;

}  // namespace minfer
