// Shared by the tests that need files or the minfer executable: where the golden data lives,
// running the CLI as a subprocess, and scratch directories.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace minfer::test {

// Whether this binary was built with AddressSanitizer (the sanitizer build, make test-asan).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// ../shared/golden/ beside the project (or $MINFER_GOLDEN_DIR).
std::string golden_path(const std::string& file);
bool golden_exists(const std::string& file);
// A model file as `make models` caches it: in $MINFER_MODEL_CACHE, or ~/.cache/minfer/models.
std::string cached_model(const std::string& file);

// Skips the current test visibly when a golden file is absent.
#define SKIP_WITHOUT_GOLDEN(file)                                                        \
  if (!::minfer::test::golden_exists(file))                                              \
  GTEST_SKIP() << "skipped: golden file " << ::minfer::test::golden_path(file)           \
               << " is absent (see ../shared/golden/README.md)"

struct CliResult {
  int exit_code = -1;   // 128 + signal when a signal ended it
  bool timed_out = false;
  double seconds = 0.0;
  uint64_t max_rss_bytes = 0;  // the process's peak resident memory
  std::string out, err;
};
struct CliOptions {
  std::string stdout_path;       // stdout goes here instead of being captured (e.g. /dev/full)
  std::string stdin_path;        // stdin comes from here (default: /dev/null)
  std::vector<std::string> env;  // extra "NAME=value" entries
  double timeout_s = 600;        // killed with SIGKILL after this long (timed_out)
};
// Runs the minfer executable built with these tests, with these arguments.
CliResult run_cli(const std::vector<std::string>& args, const CliOptions& options = {});

// A fresh directory under the system temp directory, removed with its contents at destruction.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name);
  ~ScratchDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::vector<int32_t> parse_ids(const std::string& text);  // "1,2,3" (whitespace ignored)
std::string read_file(const std::string& path);
// `text` quoted on one line for a failure message: "\n" for a newline, \xNN for other control bytes.
std::string printable(const std::string& text);
// sum (actual - expected)^2 / sum expected^2; 1 when the sizes differ or expected is all zeros.
double nmse(const std::vector<float>& expected, const std::vector<float>& actual);
// The message of the minfer::Error that `fn` throws; "(no error)" when it throws none.
std::string error_of(const std::function<void()>& fn);

}  // namespace minfer::test
