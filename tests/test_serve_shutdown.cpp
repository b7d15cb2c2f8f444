// Shutting `minfer serve` down: SIGTERM lets requests in flight finish within the grace period,
// cancels what outlasts it, a second signal ends the grace, SIGHUP drains too, and a trickling
// client cannot hold the shutdown.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "tests/serve_http_support.h"

namespace minfer::test {
namespace {

#if MINFER_HAVE_HTTPLIB

// --- Shutting down ---

TEST(ServeShutdown, SigtermLetsTheRequestInFlightFinish) {
  ServerProcess server(
      {"-m", "preset:stories15M", "--device", "ref", "--slots", "2", "--ctx", "128", "--shutdown-grace", "60"});
  ASSERT_TRUE(server.listening()) << server.log();
  Answer answer;
  std::thread in_flight(
      [&] { answer = post(server.port(), R"({"prompt": [1, 500], "max_tokens": 30, "temperature": 0})"); });
  ASSERT_TRUE(wait_metrics(server.port(), 30, [](const Metrics& m) { return m.get("minfer_busy_slots") == 1; }));
  {
    const auto start = Clock::now();
    std::thread stopper;
    int status = -2;
    stopper = std::thread([&] { status = server.signal_and_wait(SIGTERM, 60); });
    // While it drains, /health says so (until the socket closes).
    bool saw_503 = false;
    while (!saw_503 && since(start) < 30) {
      const int health = get(server.port(), "/health").status;
      saw_503 = health == 503;
      if (health == -1) break;
    }
    stopper.join();
    in_flight.join();
    EXPECT_TRUE(saw_503);
    EXPECT_EQ(status, 0) << server.log();
    EXPECT_EQ(answer.status, 200) << answer.raw;
    EXPECT_EQ(answer.body["usage"]["completion_tokens"], 30);
    EXPECT_NE(server.log().find("minfer: shut down; requests finished: 1, cancelled: 0"), std::string::npos)
        << server.log();
  }
}

TEST(ServeShutdown, SigtermCancelsWhatOutlastsTheGrace) {
  ServerProcess server(
      {"-m", "preset:stories15M", "--device", "ref", "--slots", "2", "--ctx", "256", "--shutdown-grace", "1"});
  ASSERT_TRUE(server.listening()) << server.log();
  Answer answer;
  std::thread in_flight([&] { answer = post(server.port(), kLongStream); });
  ASSERT_TRUE(
      wait_metrics(server.port(), 30, [](const Metrics& m) { return m.get("minfer_generation_tokens_total") >= 1; }));
  const auto start = Clock::now();
  const int status = server.signal_and_wait(SIGTERM, 30);
  const double seconds = since(start);
  in_flight.join();
  EXPECT_EQ(status, 0) << server.log();
  EXPECT_LT(seconds, 1 + 5.0);
  // The stream was cut cleanly: whole events, the last one an error saying why, no [DONE].
  ASSERT_EQ(answer.status, 200);
  SseEvents sse = parse_sse(answer.raw);
  EXPECT_TRUE(sse.well_formed) << answer.raw;
  EXPECT_FALSE(sse.done);
  ASSERT_FALSE(sse.events.empty());
  EXPECT_EQ(sse.events.back()["error"]["code"], "shutting_down") << answer.raw;
  EXPECT_NE(server.log().find("minfer: shut down; requests finished: 0, cancelled: 1"), std::string::npos)
      << server.log();
}

TEST(ServeShutdown, ATricklingClientCannotHoldTheShutdown) {
  ServerProcess server({"-m", "preset:tiny", "--shutdown-grace", "0.5", "--header-timeout", "60", "--body-timeout", "60"});
  ASSERT_TRUE(server.listening()) << server.log();
  const int head = connect_local(server.port()), body = connect_local(server.port());
  ASSERT_GE(head, 0);
  ASSERT_GE(body, 0);
  ASSERT_TRUE(send_all(body, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n"));
  std::thread heads([&] { trickle(head, "GET /health HTTP/1.1\r\n" + std::string(1000, 'X'), 20, 20); });
  std::thread bodies([&] { trickle(body, std::string(1000, 'x'), 20, 20); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = Clock::now();
  const int status = server.signal_and_wait(SIGTERM, 20);
  const double seconds = since(start);
  close(head);
  close(body);
  heads.join();
  bodies.join();
  EXPECT_EQ(status, 0) << server.log();
  EXPECT_LT(seconds, 0.5 + 2 + 2.0) << "grace 0.5 s, then 2 s for what was being written";
}

TEST(ServeShutdown, ASecondSignalEndsTheGraceAtOnce) {
  ServerProcess server(
      {"-m", "preset:stories15M", "--device", "ref", "--slots", "2", "--ctx", "256", "--shutdown-grace", "60"});
  ASSERT_TRUE(server.listening()) << server.log();
  Answer answer;
  std::thread in_flight([&] { answer = post(server.port(), kLongStream); });
  ASSERT_TRUE(
      wait_metrics(server.port(), 30, [](const Metrics& m) { return m.get("minfer_generation_tokens_total") >= 1; }));
  const auto start = Clock::now();
  ASSERT_TRUE(server.signal(SIGTERM));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int status = server.signal_and_wait(SIGTERM, 30);
  const double seconds = since(start);
  in_flight.join();
  EXPECT_EQ(status, 0) << server.log();
  // Not the 60 s grace: the cancel (at most 2 s) and the cut of what is still open (2 s) at most.
  EXPECT_LT(seconds, 0.3 + 2 + 2 + 1.0) << server.log();
  const SseEvents sse = parse_sse(answer.raw);
  EXPECT_TRUE(sse.well_formed) << answer.raw;
  ASSERT_FALSE(sse.events.empty());
  EXPECT_EQ(sse.events.back()["error"]["code"], "shutting_down") << answer.raw;
}

// SIGHUP (the terminal closed) drains as SIGTERM does: the stream in flight ends whole.
TEST(ServeShutdown, SighupDrainsAsSigtermDoes) {
  ServerProcess server(
      {"-m", "preset:stories15M", "--device", "ref", "--slots", "2", "--ctx", "128", "--shutdown-grace", "60"});
  ASSERT_TRUE(server.listening()) << server.log();
  Answer answer;
  std::thread in_flight([&] {
    answer = post(server.port(), R"({"prompt": [1, 500], "max_tokens": 20, "temperature": 0, "stream": true})");
  });
  ASSERT_TRUE(
      wait_metrics(server.port(), 30, [](const Metrics& m) { return m.get("minfer_generation_tokens_total") >= 1; }));
  const int status = server.signal_and_wait(SIGHUP, 60);
  in_flight.join();
  EXPECT_EQ(status, 0) << server.log();
  const SseEvents sse = parse_sse(answer.raw);
  EXPECT_TRUE(sse.well_formed && sse.done) << answer.raw;
  EXPECT_NE(server.log().find("minfer: shut down; requests finished: 1, cancelled: 0"), std::string::npos)
      << server.log();
}

#endif  // MINFER_HAVE_HTTPLIB

}  // namespace
}  // namespace minfer::test
