// What the `minfer serve` tests share: a server process on 127.0.0.1 and a free port, killed
// whatever happens to the test; a raw socket client for clients that misbehave; the server-sent
// events and the /metrics text parsed.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace minfer::test {

class ServerProcess {
 public:
  // Starts `minfer serve ARGS --host 127.0.0.1 --port 0` and waits (up to a minute) for its
  // "listening on" line. The server is killed with SIGKILL at destruction if it still runs, and
  // by the kernel if this process dies first (PR_SET_PDEATHSIG).
  explicit ServerProcess(const std::vector<std::string>& args);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool listening() const { return port_ > 0; }
  int port() const { return port_; }
  std::string log() const;  // its stderr so far
  // Sends `sig` and waits for the exit: its status (128 + the signal when one ended it), or -1
  // when it still runs after `timeout_s`.
  int signal_and_wait(int sig, double timeout_s);
  // Sends `sig` without waiting (false when it has exited).
  bool signal(int sig);
  // Its resident memory now (VmRSS), in KiB; -1 when it cannot be read.
  int64_t rss_kib() const;
  // The most resident memory it has had since it started (VmHWM), in KiB; -1 when it cannot be read.
  int64_t peak_rss_kib() const;

 private:
  ScratchDir dir_;
  std::string log_path_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int port_ = -1;
};

// A TCP connection to 127.0.0.1:port, or -1.
int connect_local(int port);
bool send_all(int fd, const std::string& bytes);
// Reads until `marker` has been received (true) or `timeout_s` passed or the peer closed (false).
bool read_until(int fd, const std::string& marker, double timeout_s, std::string* received);
// A POST of a JSON body to /v1/completions, as bytes on the wire.
std::string completion_request_bytes(const std::string& body);

// The events of a text/event-stream body: the JSON of each "data: " line, and whether it ended
// with "data: [DONE]" (after which nothing may come).
struct SseEvents {
  std::vector<nlohmann::json> events;
  bool done = false;
  bool well_formed = true;  // every event is "data: ...\n\n" with JSON, and nothing follows [DONE]
};
SseEvents parse_sse(const std::string& body);

// /metrics: each sample line "name{labels} value" by its name with labels, in order of appearance.
struct Metrics {
  std::map<std::string, double> samples;
  std::vector<std::string> names;            // every sample's name{labels}, in order
  bool well_formed = true;                   // every line a comment or "name[{labels}] number"
  double get(const std::string& key) const;  // -1 when absent
};
Metrics parse_metrics(const std::string& text);

}  // namespace minfer::test
