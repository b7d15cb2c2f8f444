// What the tests of `minfer serve` over HTTP share (with cpp-httplib only): the text model, a
// client's answers, /metrics, waiting on them, greedy ids from `minfer generate`, the error
// object's checks, a trickling client, and SharedServer, one server process per test suite.
#pragma once

#if MINFER_HAVE_HTTPLIB

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/serve_support.h"
#include "tests/test_support.h"

namespace minfer::test {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

inline const std::string kTextModel = MINFER_SOURCE_DIR "/tests/data/models/llama2-f32.gguf";  // vocab 1003, ctx 128

// Requests that keep a slot of preset:stories15M on the reference backend busy for seconds.
inline const std::string kLongRequest = R"({"prompt": [1, 500, 600], "max_tokens": 250, "temperature": 0})";
inline const std::string kLongStream =
    R"({"prompt": [1, 500, 600], "max_tokens": 250, "temperature": 0, "stream": true})";

double since(Clock::time_point start);

struct Answer {
  int status = -1;  // -1: no answer
  json body;
  std::string raw;
};

std::unique_ptr<httplib::Client> client(int port);
Answer post(int port, const std::string& body, const std::string& path = "/v1/completions");
Answer get(int port, const std::string& path);
Metrics metrics(int port);
// SIGTERM, then exit status 0 with nothing on stderr from the sanitizers (LeakSanitizer makes the
// status non-zero too): the end of every server the tests start.
void expect_clean_exit(ServerProcess& server);
std::vector<int32_t> ids_of(const json& v);
std::string ids_text(const std::vector<int32_t>& ids);
// What `minfer generate --temp 0` prints for the same prompt.
std::vector<int32_t> generate_greedy(const std::vector<std::string>& prompt_args, int64_t n,
                                     const std::string& model = kTextModel);
// `a` is OpenAI's error object with `status` and a one-line message containing `fragment`.
void expect_api_error(const Answer& a, int status, const std::string& fragment);
// Sends `bytes` one at a time, `gap_ms` apart, until they are sent, a send fails or `max_s` passes.
void trickle(int fd, const std::string& bytes, int gap_ms, double max_s);

// Polls /metrics until `done` holds or `timeout_s` passes.
template <class Done>
bool wait_metrics(int port, double timeout_s, Done done) {
  const auto start = Clock::now();
  while (since(start) < timeout_s) {
    if (done(metrics(port))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A test suite sharing one server, started with Suite::server_args() before its first test and
// stopped (cleanly, checked) after its last.
template <class Suite>
class SharedServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess(Suite::server_args()); }
  static void TearDownTestSuite() {
    expect_clean_exit(*server_);
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(server_->listening()) << server_->log(); }
  static int port() { return server_->port(); }
  static inline ServerProcess* server_ = nullptr;
};

}  // namespace minfer::test

#endif  // MINFER_HAVE_HTTPLIB
