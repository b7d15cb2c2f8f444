// Errors: every failure minfer can report is a minfer::Error whose what() is one line a user can
// act on. The CLI prints it after "minfer: error: " and exits non-zero; nothing aborts.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace minfer {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}
}  // namespace detail

// fail("bad dim ", d, " (limit ", limit, ")") throws Error with the concatenated message.
template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  throw Error(detail::concat(std::forward<Parts>(parts)...));
}

}  // namespace minfer

// MINFER_CHECK(cond, parts...) throws minfer::Error(parts...) when cond is false.
#define MINFER_CHECK(cond, ...)                  \
  do {                                           \
    if (!(cond)) ::minfer::fail(__VA_ARGS__);    \
  } while (0)
