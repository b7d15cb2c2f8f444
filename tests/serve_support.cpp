#include "tests/serve_support.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

extern char** environ;

namespace minfer::test {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }
}  // namespace

ServerProcess::ServerProcess(const std::vector<std::string>& args) : dir_("serve") {
  log_path_ = dir_.file("stderr");
  std::vector<std::string> argv_storage = {MINFER_CLI_PATH, "serve"};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  argv_storage.insert(argv_storage.end(), {"--host", "127.0.0.1", "--port", "0"});
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  // note: fork and exec rather than posix_spawn, for PR_SET_PDEATHSIG: a test process that
  // crashes (a sanitizer report) must not leave a server behind. Between fork and exec the
  // child calls only async-signal-safe functions.
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int in = open("/dev/null", O_RDONLY);
    const int out = open("/dev/null", O_WRONLY);
    const int err = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(127);
    execve(MINFER_CLI_PATH, argv.data(), environ);
    _exit(127);
  }
  if (pid_ < 0) return;
  const std::string marker = "minfer: listening on http://127.0.0.1:";
  const auto start = Clock::now();
  while (since(start) < 60) {
    const std::string text = log();
    const size_t at = text.find(marker);
    if (at != std::string::npos && text.find('\n', at) != std::string::npos) {
      port_ = std::atoi(text.c_str() + at + marker.size());
      return;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

ServerProcess::~ServerProcess() {
  if (pid_ <= 0 || exited_) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
}

std::string ServerProcess::log() const { return read_file(log_path_); }

bool ServerProcess::signal(int sig) { return pid_ > 0 && !exited_ && kill(pid_, sig) == 0; }

namespace {
// A "Name:   N kB" line of /proc/PID/status, in KiB; -1 when absent.
int64_t status_kib(pid_t pid, const std::string& name) {
  const std::string status = read_file("/proc/" + std::to_string(pid) + "/status");
  const size_t at = status.find(name + ":");
  return at == std::string::npos ? -1 : std::atoll(status.c_str() + at + name.size() + 1);
}
}  // namespace

int64_t ServerProcess::rss_kib() const { return status_kib(pid_, "VmRSS"); }
int64_t ServerProcess::peak_rss_kib() const { return status_kib(pid_, "VmHWM"); }

int ServerProcess::signal_and_wait(int sig, double timeout_s) {
  if (pid_ <= 0 || exited_) return -1;
  kill(pid_, sig);
  const auto start = Clock::now();
  while (since(start) < timeout_s) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

int connect_local(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

bool read_until(int fd, const std::string& marker, double timeout_s, std::string* received) {
  const auto start = Clock::now();
  char buffer[4096];
  while (received->find(marker) == std::string::npos) {
    const double left = timeout_s - since(start);
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) continue;
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    received->append(buffer, static_cast<size_t>(n));
  }
  return true;
}

std::string completion_request_bytes(const std::string& body) {
  return "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

SseEvents parse_sse(const std::string& body) {
  SseEvents out;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos || out.done || body.compare(at, 6, "data: ") != 0) {
      out.well_formed = false;
      break;
    }
    const std::string data = body.substr(at + 6, end - at - 6);
    if (data == "[DONE]") {
      out.done = true;
    } else {
      nlohmann::json event = nlohmann::json::parse(data, nullptr, false);
      if (event.is_discarded()) out.well_formed = false;
      out.events.push_back(std::move(event));
    }
    at = end + 2;
  }
  return out;
}

double Metrics::get(const std::string& key) const {
  auto it = samples.find(key);
  return it == samples.end() ? -1.0 : it->second;
}

Metrics parse_metrics(const std::string& text) {
  Metrics m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    char* end = nullptr;
    const double value = space == std::string::npos ? 0.0 : std::strtod(line.c_str() + space + 1, &end);
    if (space == std::string::npos || end == nullptr || *end != '\0') {
      m.well_formed = false;
      continue;
    }
    const std::string key = line.substr(0, space);
    m.samples[key] = value;
    m.names.push_back(key);
  }
  return m;
}

}  // namespace minfer::test
