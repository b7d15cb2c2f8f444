#include "tests/serve_http_support.h"

#if MINFER_HAVE_HTTPLIB

#include <signal.h>
#include <sys/socket.h>

namespace minfer::test {

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::unique_ptr<httplib::Client> client(int port) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  c->set_connection_timeout(10, 0);
  c->set_read_timeout(120, 0);
  c->set_write_timeout(10, 0);
  return c;
}

Answer post(int port, const std::string& body, const std::string& path) {
  Answer a;
  auto result = client(port)->Post(path.c_str(), body, "application/json");
  if (!result) return a;
  a.status = result->status;
  a.raw = result->body;
  a.body = json::parse(result->body, nullptr, false);
  return a;
}

Answer get(int port, const std::string& path) {
  Answer a;
  auto result = client(port)->Get(path.c_str());
  if (!result) return a;
  a.status = result->status;
  a.raw = result->body;
  a.body = json::parse(result->body, nullptr, false);
  return a;
}

Metrics metrics(int port) { return parse_metrics(get(port, "/metrics").raw); }

void expect_clean_exit(ServerProcess& server) {
  if (!server.listening()) return;
  EXPECT_EQ(server.signal_and_wait(SIGTERM, 60), 0) << server.log();
  const std::string log = server.log();
  EXPECT_EQ(log.find("Sanitizer"), std::string::npos) << log;
  EXPECT_EQ(log.find("runtime error"), std::string::npos) << log;
}

std::vector<int32_t> ids_of(const json& v) { return v.get<std::vector<int32_t> >(); }

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

std::vector<int32_t> generate_greedy(const std::vector<std::string>& prompt_args, int64_t n, const std::string& model) {
  std::vector<std::string> args = {"generate", "-m", model, "-n", std::to_string(n), "--temp", "0", "--print-ids"};
  args.insert(args.end(), prompt_args.begin(), prompt_args.end());
  CliResult r = run_cli(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return parse_ids(r.out);
}

void expect_api_error(const Answer& a, int status, const std::string& fragment) {
  EXPECT_EQ(a.status, status) << a.raw;
  ASSERT_TRUE(a.body.is_object() && a.body.contains("error")) << a.raw;
  const json& e = a.body["error"];
  ASSERT_TRUE(e["message"].is_string()) << a.raw;
  const std::string message = e["message"];
  EXPECT_NE(message.find(fragment), std::string::npos) << "status " << status << ": " << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_TRUE(e["type"].is_string()) << a.raw;
  EXPECT_TRUE(e.contains("param") && e.contains("code")) << a.raw;
}

void trickle(int fd, const std::string& bytes, int gap_ms, double max_s) {
  const auto start = Clock::now();
  for (char c : bytes) {
    if (since(start) > max_s || ::send(fd, &c, 1, MSG_NOSIGNAL) != 1) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
  }
}

}  // namespace minfer::test

#endif  // MINFER_HAVE_HTTPLIB
