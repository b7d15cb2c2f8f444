// Clients that trickle, flood or send too much (issue 20): deadlines for heads and bodies (408),
// a cap on heads (431), trickling clients at the connection limit, half-closed clients, seeds,
// stream_options and conflicting Content-Lengths.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "serve/serve_api.h"
#include "tests/serve_http_support.h"

namespace minfer::test {
namespace {

#if MINFER_HAVE_HTTPLIB

// --- Clients that trickle, flood or send too much (issue 20) ---

class ServeAbuse : public SharedServer<ServeAbuse> {
 public:
  static std::vector<std::string> server_args() {
    return {"-m", "preset:tiny", "--slots", "1", "--max-queue", "2", "--max-connections", "8", "--header-timeout", "0.5",
            "--body-timeout", "0.5"};
  }
};

// The answer on `fd` to a client trickling `bytes` a byte every 50 ms for up to 4 s.
std::string answer_to_trickle(int fd, const std::string& bytes, double* seconds) {
  const auto start = Clock::now();
  std::thread sender([&] { trickle(fd, bytes, 50, 4); });
  std::string answer;
  read_until(fd, "}}", 4, &answer);
  *seconds = since(start);
  sender.join();
  return answer;
}

TEST_F(ServeAbuse, HeadersTrickledPastTheirDeadlineAreAnswered408) {
  const int fd = connect_local(port());
  ASSERT_GE(fd, 0);
  double seconds = 0;
  const std::string answer =
      answer_to_trickle(fd, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + std::string(200, 'X'), &seconds);
  close(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.1 408", 0), 0u) << answer;
  EXPECT_NE(answer.find("did not arrive within 0.5 s (--header-timeout)"), std::string::npos) << answer;
  EXPECT_LT(seconds, 2.0);
  EXPECT_EQ(get(port(), "/health").status, 200);
}

TEST_F(ServeAbuse, BodyTrickledPastItsDeadlineIsAnswered408) {
  const int fd = connect_local(port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Content-Length: 200\r\n\r\n"));
  double seconds = 0;
  const std::string answer = answer_to_trickle(fd, R"({"prompt": [1, 2], "max_tokens": 2, "x": ")" + std::string(200, 'x'),
                                               &seconds);
  close(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.1 408", 0), 0u) << answer;
  EXPECT_NE(answer.find("the request body did not arrive within 0.5 s (--body-timeout)"), std::string::npos) << answer;
  EXPECT_LT(seconds, 2.0);
}

TEST_F(ServeAbuse, HeadersOverTheLimitAreAnswered431) {
  const int fd = connect_local(port());
  ASSERT_GE(fd, 0);
  std::string head = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  while (head.size() < 100 * 1024) head += "X-Filler: " + std::string(90, 'f') + "\r\n";
  send_all(fd, head + "\r\n");  // the server may close before it has all of it
  std::string answer;
  read_until(fd, "}}", 5, &answer);
  close(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.1 431", 0), 0u) << answer.substr(0, 200);
  EXPECT_NE(answer.find("the request line and headers are over 65536 bytes"), std::string::npos) << answer;
  EXPECT_EQ(get(port(), "/health").status, 200);
}

TEST_F(ServeAbuse, TricklingClientsAtTheConnectionLimitLockNobodyOut) {
  // As many slow clients as the server takes connections, each trickling a header for 3 s.
  std::vector<std::thread> slow;
  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) {
    const int fd = connect_local(port());
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
    slow.emplace_back([fd] { trickle(fd, "GET /health HTTP/1.1\r\n" + std::string(100, 'X'), 30, 3); });
  }
  // Their head deadline frees their connections, and /health is answered while they still trickle.
  const auto start = Clock::now();
  int status = -1;
  while (status != 200 && since(start) < 2.5) status = get(port(), "/health").status;
  EXPECT_EQ(status, 200) << "after " << since(start) << " s";
  EXPECT_LT(since(start), 2.5);
  for (auto& t : slow) t.join();
  for (int fd : fds) close(fd);
}


TEST_F(ServeAbuse, HalfClosedClientsStillGetTheirAnswers) {
  // A client may shut its sending side once its request is sent and read on (RFC 9112, 9.6).
  for (const bool stream : {false, true}) {
    const json request = {{"prompt", {1, 7}}, {"max_tokens", 500}, {"temperature", 0}, {"ignore_eos", true},
                          {"stream", stream}};
    const int fd = connect_local(port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, completion_request_bytes(request.dump())));
    ASSERT_EQ(::shutdown(fd, SHUT_WR), 0);
    const auto start = Clock::now();
    std::string answer;
    read_until(fd, stream ? "data: [DONE]" : "\"total_tokens\"", 60, &answer);
    close(fd);
    SCOPED_TRACE(stream ? "stream" : "whole");
    // A whole answer's client was probed with an interim 100 Continue if it waited 50 ms or more.
    const std::string status = answer.rfind("HTTP/1.1 100 Continue\r\n\r\n", 0) == 0 ? answer.substr(25) : answer;
    EXPECT_EQ(status.rfind("HTTP/1.1 200 OK", 0), 0u) << answer.substr(0, 300);
    EXPECT_NE(answer.find(stream ? "data: [DONE]" : "\"completion_tokens\":500"), std::string::npos)
        << answer.substr(0, 300);
    std::printf("[ half     ] %s answer after %.2f s, %s\n", stream ? "streamed" : "whole", since(start),
                answer.rfind("HTTP/1.1 100", 0) == 0 ? "probed with 100 Continue" : "not probed");
  }
}

TEST_F(ServeAbuse, AnyIntegerSeedIsAcceptedAndZeroDrawsTheSameTwice) {
  auto ids = [&](const std::string& seed) {
    Answer a = post(port(), R"({"prompt": [1, 7], "max_tokens": 12, "temperature": 1, "seed": )" + seed + "}");
    EXPECT_EQ(a.status, 200) << "seed " << seed << ": " << a.raw;
    return a.status == 200 ? ids_text(ids_of(a.body["choices"][0]["token_ids"])) : a.raw;
  };
  EXPECT_EQ(ids("0"), ids("0"));
  EXPECT_EQ(ids("-5"), ids("-5"));
  EXPECT_EQ(ids("0"), ids(std::to_string(serve::kSeedZeroState)));
  EXPECT_NE(ids("0"), ids("1"));
}

TEST_F(ServeAbuse, StreamOptionsIncludeUsageEndsWithAUsageOnlyEvent) {
  Answer a = post(port(), R"({"prompt": [1, 7], "max_tokens": 5, "temperature": 0, "stream": true,
                              "stream_options": {"include_usage": true}})");
  ASSERT_EQ(a.status, 200) << a.raw;
  SseEvents sse = parse_sse(a.raw);
  ASSERT_TRUE(sse.well_formed && sse.done) << a.raw;
  ASSERT_GE(sse.events.size(), 2u) << a.raw;
  for (size_t i = 0; i + 1 < sse.events.size(); ++i) {
    EXPECT_TRUE(sse.events[i].contains("usage") && sse.events[i]["usage"].is_null()) << sse.events[i].dump();
    EXPECT_EQ(sse.events[i]["choices"].size(), 1u) << sse.events[i].dump();
  }
  const json& last = sse.events.back();
  EXPECT_TRUE(last["choices"].is_array() && last["choices"].empty()) << last.dump();
  EXPECT_EQ(last["usage"]["completion_tokens"], 5) << last.dump();
  EXPECT_EQ(last["usage"]["prompt_tokens"], 2) << last.dump();
}

TEST_F(ServeAbuse, TwoDifferentContentLengthsAreRefused) {
  const int fd = connect_local(port());
  ASSERT_GE(fd, 0);
  const std::string body = R"({"prompt": [1, 2], "max_tokens": 2})";
  ASSERT_TRUE(send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Content-Length: " + std::to_string(body.size()) + "\r\nContent-Length: 5\r\n\r\n" + body));
  std::string answer;
  read_until(fd, "}}", 5, &answer);
  close(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << answer;
  EXPECT_NE(answer.find("two different Content-Length headers"), std::string::npos) << answer;
}


#endif  // MINFER_HAVE_HTTPLIB

}  // namespace
}  // namespace minfer::test
