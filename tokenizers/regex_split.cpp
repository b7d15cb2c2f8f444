#include "tokenizers/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"
#include "tokenizers/utf8.h"

namespace minfer {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

constexpr size_t kJitStackMax = size_t(8) << 20;

// Match data and a JIT stack, made once per thread (PCRE2 match data cannot be shared between
// threads, and making them per call costs an mmap each time: thousands of small pieces per text).
struct MatchResources {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);  // the whole match is enough
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 << 10, kJitStackMax, nullptr);
  MatchResources() {
    if (context && jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~MatchResources() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
};

// Unicode's White_Space characters: what \s matches in Oniguruma (the tokenizers library's regex
// engine). PCRE2's \s also matches U+180E, which Unicode 6.3 took out of the spaces.
constexpr const char* kWhiteSpace =
    "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// `pattern` with \s and \S spelled as Oniguruma means them (\S inside a class is left alone).
std::string with_oniguruma_spaces(const std::string& pattern) {
  std::string out;
  int class_depth = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        out += class_depth > 0 ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (next == 'S' && class_depth == 0) {
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (c == '[') ++class_depth;
    if (c == ']' && class_depth > 0) --class_depth;
    out += c;
  }
  return out;
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& source) : pattern_(pattern), source_(source) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // UCP: \d, \w and POSIX classes follow Unicode properties, as in Oniguruma and fancy-regex.
  const std::string compiled = with_oniguruma_spaces(pattern);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    fail(source, ": regular expression is not supported at offset ", offset, ": ",
         reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // when JIT is unavailable the interpreter runs
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::for_each_match(const std::string& text, const std::function<void(size_t, size_t)>& on_match) const {
  auto* code = static_cast<pcre2_code*>(code_);
  thread_local MatchResources r;
  MINFER_CHECK(r.data && r.context && r.jit_stack, source_, ": out of memory for a regular expression match");
  size_t start = 0;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  while (start < text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), start, 0, r.data, r.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      fail(source_, ": regular expression /", pattern_, "/ failed on a text of ", text.size(),
           " bytes: ", reinterpret_cast<const char*>(message));
    }
    // (Read before on_match, whose own matches overwrite the thread's match data.)
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(r.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      on_match(begin, end);
      start = end;
    } else {
      // An empty match: step over one character (one byte where the text is not valid UTF-8).
      const size_t length = utf8::valid_char_length(text.data() + begin, text.size() - begin);
      start = begin + (length > 0 ? length : 1);
    }
  }
}

}  // namespace minfer
