#include "tests/test_support.h"

#include "core/error.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

extern char** environ;

namespace minfer::test {

std::string golden_path(const std::string& file) {
  const char* dir = std::getenv("MINFER_GOLDEN_DIR");
  return std::string(dir != nullptr ? dir : MINFER_SOURCE_DIR "/../shared/golden") + "/" + file;
}

bool golden_exists(const std::string& file) { return std::filesystem::exists(golden_path(file)); }

std::string cached_model(const std::string& file) {
  const char* dir = std::getenv("MINFER_MODEL_CACHE");
  const char* home = std::getenv("HOME");
  if (dir != nullptr) return std::string(dir) + "/" + file;
  return std::string(home != nullptr ? home : "/root") + "/.cache/minfer/models/" + file;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

CliResult run_cli(const std::vector<std::string>& args, const CliOptions& options) {
  ScratchDir dir("cli");
  const std::string out_path = options.stdout_path.empty() ? dir.file("stdout") : options.stdout_path;
  const std::string err_path = dir.file("stderr");
  const std::string in_path = options.stdin_path.empty() ? "/dev/null" : options.stdin_path;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, in_path.c_str(), O_RDONLY | O_NONBLOCK, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> argv_storage = {MINFER_CLI_PATH};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) env_storage.push_back(*e);
  env_storage.insert(env_storage.end(), options.env.begin(), options.env.end());
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  CliResult result;
  const auto start = std::chrono::steady_clock::now();
  if (posix_spawn(&pid, MINFER_CLI_PATH, &actions, nullptr, argv.data(), envp.data()) == 0) {
    int status = 0;
    struct rusage usage {};
    for (;;) {
      const pid_t done = wait4(pid, &status, WNOHANG, &usage);
      if (done == pid) break;
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > options.timeout_s) {
        kill(pid, SIGKILL);
        wait4(pid, &status, 0, &usage);
        result.timed_out = true;
        break;
      }
      usleep(2000);
    }
    result.max_rss_bytes = uint64_t(usage.ru_maxrss) * 1024;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  posix_spawn_file_actions_destroy(&actions);
  if (options.stdout_path.empty()) result.out = read_file(out_path);
  result.err = read_file(err_path);
  return result;
}

ScratchDir::ScratchDir(const std::string& name) {
  static int counter = 0;
  path_ = std::filesystem::temp_directory_path().string() + "/minfer-test-" + std::to_string(getpid()) +
          "-" + name + "-" + std::to_string(counter++);
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    size_t start = part.find_first_not_of(" \n\r\t");
    if (start == std::string::npos) continue;
    ids.push_back(std::stoi(part.substr(start)));
  }
  return ids;
}

double nmse(const std::vector<float>& expected, const std::vector<float>& actual) {
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < expected.size() && i < actual.size(); ++i) {
    err += (double(expected[i]) - actual[i]) * (double(expected[i]) - actual[i]);
    norm += double(expected[i]) * expected[i];
  }
  return expected.size() == actual.size() && norm > 0 ? err / norm : 1.0;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7F) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02X", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return "\"" + out + "\"";
}

}  // namespace minfer::test
