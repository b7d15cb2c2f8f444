// A hostile client against a live `minfer serve` (issue 37): JSON nested to crash it, Range
// headers and chunk-size lines to fill its memory, framing that smuggles a second request, a body
// without framing, HTTP/1.0 clients, Host, Connection, long headers and odd numbers. Each ends in
// one clear 4xx (or the right answer) and, where the request was ambiguous, a closed connection;
// the server goes on serving with its memory where it was. The front door's rules on bytes alone:
// test_http_framing.cpp.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "tests/serve_http_support.h"

namespace minfer::test {
namespace {

#if MINFER_HAVE_HTTPLIB

class ServeFrontDoor : public SharedServer<ServeFrontDoor> {
 public:
  static std::vector<std::string> server_args() {
    return {"-m", "preset:tiny", "--slots", "2", "--header-timeout", "3", "--body-timeout", "3"};
  }
};

struct Exchange {
  std::string answer;
  bool closed = false;  // the server closed the connection
  double seconds = 0;   // until it did, or until the timeout
};

// Sends `bytes` on a new connection and reads until the server closes it or `timeout_s` passes.
Exchange exchange(int port, const std::string& bytes, double timeout_s = 2) {
  Exchange e;
  const int fd = connect_local(port);
  if (fd < 0) return e;
  const auto start = Clock::now();
  send_all(fd, bytes);
  char buffer[4096];
  while (since(start) < timeout_s) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) {
      e.closed = true;
      break;
    }
    e.answer.append(buffer, static_cast<size_t>(n));
  }
  e.seconds = since(start);
  close(fd);
  return e;
}

int status_of(const std::string& answer) {
  return answer.rfind("HTTP/1.1 ", 0) == 0 ? std::atoi(answer.c_str() + 9) : -1;
}

size_t answers_in(const std::string& text) {
  size_t n = 0;
  for (size_t at = text.find("HTTP/1.1 "); at != std::string::npos; at = text.find("HTTP/1.1 ", at + 1))
    if (at == 0 || text[at - 1] == '\n' || text[at - 1] == '}') ++n;
  return n;
}

std::string body_of(const std::string& answer) {
  const size_t at = answer.find("\r\n\r\n");
  return at == std::string::npos ? "" : answer.substr(at + 4);
}

const std::string kHost = "Host: 127.0.0.1\r\n";
const std::string kSmuggled = "GET /v1/models HTTP/1.1\r\n" + kHost + "\r\n";

// A POST whose connection ends after its answer.
std::string post_bytes(const std::string& path, const std::string& body, const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\n" + kHost + extra + "Connection: close\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST_F(ServeFrontDoor, DeeplyNestedJsonIsRefusedAndTheServerLives) {
  // 100,000 levels crashed the server (printing or copying a value recurses once per level).
  const Exchange completion =
      exchange(port(), post_bytes("/v1/completions", R"({"prompt": "a", "stream_options": )" + nested(100000) + "}"));
  EXPECT_EQ(status_of(completion.answer), 400) << completion.answer.substr(0, 300);
  EXPECT_NE(completion.answer.find("nests arrays and objects more than 64 deep"), std::string::npos);
  const Exchange chat = exchange(
      port(), post_bytes("/v1/chat/completions", R"({"messages": [], "response_format": {"type": )" + nested(100000) + "}}"));
  EXPECT_EQ(status_of(chat.answer), 400) << chat.answer.substr(0, 300);
  // 64 levels in all parse (and are refused for what they are); 65 do not.
  const Exchange deeper =
      exchange(port(), post_bytes("/v1/completions", R"({"prompt": [1], "stream_options": )" + nested(64) + "}"));
  EXPECT_NE(deeper.answer.find("more than 64 deep"), std::string::npos) << deeper.answer.substr(0, 300);
  const Exchange shallow =
      exchange(port(), post_bytes("/v1/completions", R"({"prompt": [1], "stream_options": )" + nested(63) + "}"));
  EXPECT_NE(shallow.answer.find("stream_options must be an object, not an array"), std::string::npos)
      << shallow.answer.substr(0, 300);
  EXPECT_EQ(get(port(), "/health").status, 200);
}

TEST_F(ServeFrontDoor, RangeHeadersAreIgnored) {
  const std::string body = R"({"prompt": [1, 2], "max_tokens": 2, "temperature": 0})";
  const Exchange post = exchange(port(), post_bytes("/v1/completions", body, "Range: bytes=0-9\r\n"));
  EXPECT_EQ(status_of(post.answer), 200) << post.answer;
  EXPECT_EQ(json::parse(body_of(post.answer), nullptr, false)["object"], "text_completion") << post.answer;
  std::string ranges = "bytes=0-0";
  for (int i = 1; i < 2700; ++i) ranges += "," + std::to_string(i) + "-" + std::to_string(i);
  const Exchange metrics =
      exchange(port(), "GET /metrics HTTP/1.1\r\n" + kHost + "Range: " + ranges + "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_of(metrics.answer), 200) << metrics.answer.substr(0, 300);
  EXPECT_EQ(metrics.answer.find("multipart/byteranges"), std::string::npos);
  EXPECT_NE(body_of(metrics.answer).find("minfer_busy_slots"), std::string::npos);
}

TEST_F(ServeFrontDoor, AChunkSizeLineThatNeverEndsIsRefusedAtOneKiB) {
  const std::string head = "POST /v1/completions HTTP/1.1\r\n" + kHost + "Transfer-Encoding: chunked\r\n\r\n";
  const Exchange e = exchange(port(), head + std::string(64 * 1024, '1'));
  EXPECT_EQ(status_of(e.answer), 400) << e.answer;
  EXPECT_NE(e.answer.find("chunk-size line is over 1024 bytes"), std::string::npos) << e.answer;
  EXPECT_TRUE(e.closed);
  EXPECT_LT(e.seconds, 1.5);  // refused as it arrives, not at the body's deadline
}

// Each of these could be read as two requests; none may answer the second.
TEST_F(ServeFrontDoor, SmugglingIsRefusedAndNothingRunsAsASecondRequest) {
  const std::string chunked_post = "POST /v1/completions HTTP/1.1\r\n" + kHost + "Transfer-Encoding: chunked\r\n\r\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a GET's body", "GET /health HTTP/1.1\r\n" + kHost + "Content-Length: " + std::to_string(kSmuggled.size()) +
                           "\r\n\r\n" + kSmuggled},
      {"a GET's chunked body", "GET /health HTTP/1.1\r\n" + kHost + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + kSmuggled},
      {"TE and CL", "POST /v1/completions HTTP/1.1\r\n" + kHost +
                        "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + kSmuggled},
      {"gzip, chunked and CL", "POST /v1/completions HTTP/1.1\r\n" + kHost +
                                   "Transfer-Encoding: gzip, chunked\r\nContent-Length: 2\r\n\r\n{}" + kSmuggled},
      {"xchunked and CL", "POST /v1/completions HTTP/1.1\r\n" + kHost +
                              "Transfer-Encoding: xchunked\r\nContent-Length: 2\r\n\r\n{}" + kSmuggled},
      {"0x2e", chunked_post + "0x2e\r\n" + std::string(46, 'a') + "\r\n0\r\n\r\n" + kSmuggled},
      {"+2e", chunked_post + "+2e\r\n" + std::string(46, 'a') + "\r\n0\r\n\r\n" + kSmuggled},
      {"space 2e", chunked_post + " 2e\r\n" + std::string(46, 'a') + "\r\n0\r\n\r\n" + kSmuggled},
      {"2e garbage", chunked_post + "2e garbage\r\n" + std::string(46, 'a') + "\r\n0\r\n\r\n" + kSmuggled},
      {"chunk data without CRLF", chunked_post + "2\r\n{}" + kSmuggled},
      {"Content-Length 4%36", "POST /v1/completions HTTP/1.1\r\n" + kHost + "Content-Length: 4%36\r\n\r\n" +
                                  std::string(4, ' ') + kSmuggled},
      {"space before the colon", "POST /v1/completions HTTP/1.1\r\n" + kHost + "Content-Length : " +
                                     std::to_string(kSmuggled.size()) + "\r\n\r\n" + kSmuggled},
      {"obs-fold", "POST /v1/completions HTTP/1.1\r\n" + kHost + "X-A: 1\r\n Content-Length: 2\r\n\r\n{}" + kSmuggled},
      {"bare LF", "GET /health HTTP/1.1\n" + kHost + "\r\n" + kSmuggled},
      {"NUL in Host", "GET /health HTTP/1.1\r\nHost: 127.0.0.1" + std::string(1, '\0') + ".evil\r\n\r\n" + kSmuggled},
  };
  for (const auto& [name, bytes] : cases) {
    const Exchange e = exchange(port(), bytes);
    const int status = status_of(e.answer);
    EXPECT_TRUE(status >= 400 && status < 600) << name << ": " << e.answer.substr(0, 400);
    EXPECT_EQ(answers_in(e.answer), 1u) << name << ": " << e.answer.substr(0, 600);
    EXPECT_EQ(e.answer.find("\"object\":\"list\""), std::string::npos) << name << ": the smuggled request ran";
    EXPECT_TRUE(e.closed) << name;
    EXPECT_LT(e.seconds, 1.5) << name;
  }
  EXPECT_EQ(get(port(), "/health").status, 200);
}

TEST_F(ServeFrontDoor, APostWithoutFramingHasAnEmptyBodyAndThePipelineGoesOn) {
  const Exchange e = exchange(port(), "POST /v1/completions HTTP/1.1\r\n" + kHost + "\r\n" + "GET /health HTTP/1.1\r\n" +
                                          kHost + "Connection: close\r\n\r\n");
  EXPECT_EQ(status_of(e.answer), 400) << e.answer;
  EXPECT_NE(e.answer.find("malformed JSON"), std::string::npos) << e.answer;
  EXPECT_EQ(answers_in(e.answer), 2u) << e.answer;
  EXPECT_NE(e.answer.find("{\"status\":\"ok\"}"), std::string::npos) << e.answer;
  EXPECT_LT(e.seconds, 1.5);  // not read until a timeout
}

TEST_F(ServeFrontDoor, AnHttp10ClientGetsAStreamWithoutChunksAndNoInterimAnswers) {
  const std::string body = R"({"prompt": [1, 2], "max_tokens": 3, "temperature": 0, "stream": true})";
  const Exchange e = exchange(port(), "POST /v1/completions HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: " +
                                          std::to_string(body.size()) + "\r\n\r\n" + body, 5);
  EXPECT_EQ(status_of(e.answer), 200) << e.answer;
  EXPECT_EQ(e.answer.find("100 Continue"), std::string::npos) << e.answer;
  EXPECT_EQ(e.answer.find("Transfer-Encoding"), std::string::npos) << e.answer;
  EXPECT_TRUE(e.closed);  // the stream ends where the connection does
  const SseEvents events = parse_sse(body_of(e.answer));
  EXPECT_TRUE(events.well_formed && events.done) << e.answer;
  EXPECT_EQ(events.events.size(), 4u) << e.answer;  // 3 tokens and the last event
}

TEST_F(ServeFrontDoor, AnHttp11ClientThatExpects100ContinueGetsIt) {
  const std::string body = R"({"prompt": [1, 2], "max_tokens": 2, "temperature": 0})";
  const Exchange e = exchange(port(), post_bytes("/v1/completions", body, "Expect: 100-continue\r\n"));
  EXPECT_EQ(e.answer.rfind("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200", 0), 0u) << e.answer;
}

TEST_F(ServeFrontDoor, HostMustBeThereOnce) {
  Exchange e = exchange(port(), "GET /health HTTP/1.1\r\n\r\n");
  EXPECT_EQ(status_of(e.answer), 400) << e.answer;
  EXPECT_NE(e.answer.find("without a Host header"), std::string::npos);
  e = exchange(port(), "GET /health HTTP/1.1\r\n" + kHost + kHost + "\r\n");
  EXPECT_EQ(status_of(e.answer), 400) << e.answer;
  EXPECT_NE(e.answer.find("more than one Host header"), std::string::npos);
  // An absolute-form target is served (RFC 9112, 3.2.2), its authority checked as the Host.
  e = exchange(port(), "GET http://127.0.0.1/health HTTP/1.1\r\n" + kHost + "Connection: close\r\n\r\n");
  EXPECT_EQ(status_of(e.answer), 200) << e.answer;
  e = exchange(port(), "GET http://evil.example/health HTTP/1.1\r\n" + kHost + "Connection: close\r\n\r\n");
  EXPECT_EQ(status_of(e.answer), 403) << e.answer;
}

TEST_F(ServeFrontDoor, ConnectionCloseIsHonouredInAnyCaseAndList) {
  for (const std::string value : {"Close", "keep-alive, close", "CLOSE"}) {
    const Exchange e =
        exchange(port(), "GET /health HTTP/1.1\r\n" + kHost + "Connection: " + value + "\r\n\r\n" + kSmuggled);
    EXPECT_EQ(status_of(e.answer), 200) << value << ": " << e.answer;
    EXPECT_EQ(answers_in(e.answer), 1u) << value << ": " << e.answer;
    EXPECT_TRUE(e.closed) << value;
    EXPECT_NE(e.answer.find("Connection: close"), std::string::npos) << e.answer;
    EXPECT_EQ(e.answer.find("Keep-Alive"), std::string::npos) << e.answer;
  }
}

TEST_F(ServeFrontDoor, HeadLimitsAreAnsweredForWhatTheyAre) {
  // One 9 KB header is past the 8 KiB a header line may have (431, saying so), not "malformed".
  Exchange e = exchange(port(), "GET /health HTTP/1.1\r\n" + kHost + "X-Big: " + std::string(9000, 'a') + "\r\n\r\n");
  EXPECT_EQ(status_of(e.answer), 431) << e.answer;
  EXPECT_NE(e.answer.find("the limit of one header line"), std::string::npos) << e.answer;
  // A bare-LF request is refused at once, not left to its deadline.
  e = exchange(port(), "GET /health HTTP/1.1\n" + std::string("Host: 127.0.0.1\n\n"));
  EXPECT_EQ(status_of(e.answer), 400) << e.answer;
  EXPECT_LT(e.seconds, 1.5);
}

TEST_F(ServeFrontDoor, OddValuesGetA4xxThatSaysWhy) {
  Exchange e = exchange(port(), post_bytes("/v1/completions", R"({"prompt": [1], "temperature": 1e400})"));
  EXPECT_EQ(status_of(e.answer), 400) << e.answer;
  EXPECT_NE(e.answer.find("number overflow"), std::string::npos) << e.answer;
  e = exchange(port(), post_bytes("/v1/completions", "--xx\r\n\r\n--xx--\r\n",
                                  "Content-Type: multipart/form-data; boundary=xx\r\n"));
  EXPECT_EQ(status_of(e.answer), 415) << e.answer;
  expect_api_error(post(port(), R"({"prompt": [1], "top_p": 1.0000001})"), 400, "top_p = 1.0000001 is outside");
  // A model name is echoed in every event of a stream: it is bounded.
  expect_api_error(post(port(), json{{"prompt", {1}}, {"model", std::string(257, 'm')}}.dump()), 400,
                   "model is over 256 bytes");
}

// `n` zero bytes in gzip (httplib's own compressor, as a client's would make them): 1 KiB holds
// about 1 MiB.
std::string gzip_of_zeros(size_t n) {
  httplib::detail::gzip_compressor gzip;
  const std::string zeros(1 << 20, '\0');
  std::string out;
  for (size_t done = 0; done < n; done += zeros.size())
    if (!gzip.compress(zeros.data(), std::min(zeros.size(), n - done), done + zeros.size() >= n,
                       [&](const char* data, size_t size) {
                         out.append(data, size);
                         return true;
                       }))
      return "";
  return out;
}

TEST_F(ServeFrontDoor, ACompressedBodyIsRefused415WithoutBeingUnpacked) {
  // 256 MiB of zeros in a body under --max-body-bytes: httplib unpacked such a body whole, and the
  // server's memory grew by all of it.
  const std::string bomb = gzip_of_zeros(size_t(256) << 20);
  ASSERT_FALSE(bomb.empty());
  ASSERT_LT(bomb.size(), size_t(1) << 20);
  const int64_t before = server_->rss_kib();
  ASSERT_GT(before, 0);
  // The peak is sampled while the bodies are sent: the memory of an unpacked body is given back
  // once it is refused (on the code before, 13 MiB -> 270 MiB -> 14 MiB).
  std::atomic<bool> sending{true};
  int64_t peak = before;
  std::thread sampler([&] {
    while (sending) {
      peak = std::max(peak, server_->rss_kib());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  for (const std::string coding : {"gzip", "x-gzip", "deflate", "br", "gzip, identity"}) {
    const Exchange e =
        exchange(port(), post_bytes("/v1/completions", bomb, "Content-Type: application/json\r\nContent-Encoding: " +
                                                                 coding + "\r\n"));
    EXPECT_EQ(status_of(e.answer), 415) << coding << ": " << e.answer.substr(0, 300);
    EXPECT_NE(e.answer.find("Content-Encoding: '"), std::string::npos) << e.answer;
    EXPECT_NE(e.answer.find("Accept-Encoding: identity\r\n"), std::string::npos) << e.answer;
    EXPECT_TRUE(e.closed) << coding;
    EXPECT_LT(e.seconds, 1.5) << coding;
  }
  sending = false;
  sampler.join();
  EXPECT_LT(peak - before, 50 * 1024) << before << " KiB -> " << peak << " KiB at the peak";
  // identity is no coding: the body is read as sent.
  const Exchange plain = exchange(port(), post_bytes("/v1/completions", R"({"prompt": [1, 2], "max_tokens": 2})",
                                                     "Content-Encoding: identity\r\n"));
  EXPECT_EQ(status_of(plain.answer), 200) << plain.answer;
  EXPECT_EQ(plain.answer.find("Content-Encoding"), std::string::npos) << plain.answer;  // answers go uncompressed
}

// The hostile client's load, several times over: memory stays where it was.
TEST_F(ServeFrontDoor, HostileClientsLeaveTheMemoryWhereItWas) {
  std::string ranges = "bytes=0-0";
  for (int i = 1; i < 2700; ++i) ranges += "," + std::to_string(i) + "-" + std::to_string(i);
  const std::string range_request = "GET /metrics HTTP/1.1\r\n" + kHost + "Range: " + ranges + "\r\n\r\n";
  const std::string chunk_flood =
      "POST /v1/completions HTTP/1.1\r\n" + kHost + "Transfer-Encoding: chunked\r\n\r\n" + std::string(1 << 20, 'f');
  const std::string deep = post_bytes("/v1/completions", R"({"prompt": "a", "stream_options": )" + nested(100000) + "}");
  (void)exchange(port(), deep);  // the first of each has been served before RSS is read
  const int64_t before = server_->rss_kib();
  ASSERT_GT(before, 0);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::thread> clients;
    for (int c = 0; c < 24; ++c)
      clients.emplace_back([&, c] {
        // Range clients read nothing back (an answer built in memory would sit there).
        const std::string& bytes = c % 3 == 0 ? range_request : c % 3 == 1 ? chunk_flood : deep;
        const int fd = connect_local(port());
        if (fd < 0) return;
        send_all(fd, bytes);
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        close(fd);
      });
    for (auto& t : clients) t.join();
  }
  const int64_t after = server_->rss_kib();
  EXPECT_LT(after - before, 50 * 1024) << before << " KiB -> " << after << " KiB";
  EXPECT_EQ(get(port(), "/health").status, 200);
}

#else

TEST(ServeFrontDoor, SkippedWithoutHttplib) { GTEST_SKIP() << "built without cpp-httplib"; }

#endif  // MINFER_HAVE_HTTPLIB

}  // namespace
}  // namespace minfer::test
