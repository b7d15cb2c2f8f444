// `minfer serve` under load on a slow model (the reference backend): a full queue answers 429,
// clients that leave are cancelled, connections over the limit get 503 without holding the
// acceptor, and requests wait in the queue before connections are refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "tests/serve_http_support.h"

namespace minfer::test {
namespace {

#if MINFER_HAVE_HTTPLIB

// --- A slow model (the reference backend): a full queue, too many connections, clients that go ---

class ServeSlow : public SharedServer<ServeSlow> {
 public:
  static std::vector<std::string> server_args() {
    // (Every client here is 127.0.0.1: its share is the whole limit.)
    return {"-m", "preset:stories15M", "--device", "ref", "--slots", "2", "--max-queue", "1", "--max-connections", "8",
            "--max-connections-per-client", "8", "--ctx", "256"};
  }

 protected:
  static double cancelled() { return metrics(port()).get("minfer_requests_finished_total{reason=\"cancelled\"}"); }
  // A long request on a raw socket, running once this returns (the socket, or -1).
  static int start_long_request(double busy_slots) {
    const double accepted = metrics(port()).get("minfer_requests_total");
    const int fd = connect_local(port());
    if (fd < 0 || !send_all(fd, completion_request_bytes(kLongRequest))) return -1;
    // (The slot of a request that just finished may still count until its step ends: the new one
    // runs once it was accepted and has left the queue.)
    if (!wait_metrics(port(), 30, [&](const Metrics& m) {
          return m.get("minfer_requests_total") == accepted + 1 && m.get("minfer_busy_slots") == busy_slots &&
                 m.get("minfer_queue_depth") == 0;
        }))
      return -1;
    return fd;
  }
};

TEST_F(ServeSlow, FullQueueIsAnswered429AndClientsThatLeaveAreCancelled) {
  const double cancelled_before = cancelled();
  // Two long requests on raw sockets take both slots ...
  const int first = start_long_request(1), second = start_long_request(2);
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  // ... a third waits in the queue of one ...
  Answer queued;
  std::thread waiting([&] { queued = post(port(), R"({"prompt": [1, 7], "max_tokens": 3})"); });
  ASSERT_TRUE(wait_metrics(port(), 30, [](const Metrics& m) { return m.get("minfer_queue_depth") == 1; }));
  // ... and a fourth is refused.
  expect_api_error(post(port(), R"({"prompt": [1, 8], "max_tokens": 3})"), 429,
                   "the queue is full (1 requests waiting)");
  EXPECT_GE(metrics(port()).get("minfer_requests_refused_total"), 1);
  // The first clients go away without reading their answers (whole answers, not streams): their
  // requests are cancelled, and the one waiting gets a slot.
  close(first);
  close(second);
  waiting.join();
  EXPECT_EQ(queued.status, 200) << queued.raw;
  EXPECT_EQ(queued.body["usage"]["completion_tokens"], 3);
  EXPECT_TRUE(wait_metrics(port(), 10,
                           [&](const Metrics& m) {
                             return m.get("minfer_busy_slots") == 0 &&
                                    m.get("minfer_requests_finished_total{reason=\"cancelled\"}") ==
                                        cancelled_before + 2;
                           }))
      << "cancelled " << cancelled() - cancelled_before;
}

TEST_F(ServeSlow, SameSeedSameTokensWhileAnotherRequestRuns) {
  const json request = {{"prompt", {1, 300}}, {"max_tokens", 6}, {"temperature", 1.0}, {"seed", 99}};
  Answer alone = post(port(), request.dump());
  ASSERT_EQ(alone.status, 200) << alone.raw;
  const int other = start_long_request(1);
  ASSERT_GE(other, 0);
  Answer shared = post(port(), request.dump());
  ASSERT_EQ(shared.status, 200) << shared.raw;
  // (Its own slot may still count until the step that retired it ends.)
  EXPECT_GE(metrics(port()).get("minfer_busy_slots"), 1) << "the other request ran all along";
  close(other);
  EXPECT_EQ(shared.body["choices"][0]["token_ids"], alone.body["choices"][0]["token_ids"]);
  EXPECT_TRUE(wait_metrics(port(), 10, [](const Metrics& m) { return m.get("minfer_busy_slots") == 0; }));
}

TEST_F(ServeSlow, ClientClosingMidStreamCancelsItsRequest) {
  const double cancelled_before = cancelled();
  const int fd = connect_local(port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, completion_request_bytes(kLongStream)));
  std::string received;
  ASSERT_TRUE(read_until(fd, "\n\n", 60, &received)) << received;  // the headers
  ASSERT_TRUE(read_until(fd, "data: {", 60, &received)) << received;
  EXPECT_NE(received.find("text/event-stream"), std::string::npos) << received;
  close(fd);
  const auto closed = Clock::now();
  EXPECT_TRUE(wait_metrics(port(), 5,
                           [&](const Metrics& m) {
                             return m.get("minfer_busy_slots") == 0 &&
                                    m.get("minfer_requests_finished_total{reason=\"cancelled\"}") ==
                                        cancelled_before + 1;
                           }))
      << "the slot is still busy " << since(closed) << " s after the client left";
  EXPECT_EQ(get(port(), "/health").status, 200);
}

// A request whose body never comes: its connection is busy, not waiting (an idle connection, or
// one without a whole head, would give its place to a new one: serve/http_server.h).
const std::string kBodyNeverSent = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\n";

TEST_F(ServeSlow, ConnectionsOverTheLimitAreAnswered503) {
  // Busy connections, one at a time, until one is refused: the server answers 503 at once, without
  // waiting for a request. (A connection of the test before may still be closing: fewer than 8 of
  // these may fit, never more.)
  std::vector<int> idle;
  std::string refusal;
  while (refusal.empty() && idle.size() < 12) {
    const int fd = connect_local(port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, kBodyNeverSent));
    if (!read_until(fd, "}", 0.3, &refusal)) {
      refusal.clear();
      idle.push_back(fd);
      continue;
    }
    close(fd);
  }
  EXPECT_GE(idle.size(), 6u);
  EXPECT_LE(idle.size(), 8u);
  EXPECT_EQ(refusal.rfind("HTTP/1.1 503", 0), 0u) << refusal;
  EXPECT_NE(refusal.find("too many open connections (--max-connections 8)"), std::string::npos) << refusal;
  for (int fd : idle) close(fd);
  // Once they are gone, the server answers again.
  const auto start = Clock::now();
  int status = -1;
  while (status != 200 && since(start) < 10) status = get(port(), "/health").status;
  EXPECT_EQ(status, 200);
}

TEST_F(ServeSlow, RefusalsOverTheLimitDoNotHoldTheAcceptor) {
  // The connections of the tests before have closed (each lingers up to 1 s) ...
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  // ... and 12 busy ones at once meet the limit of 8: those over it are refused at once.
  std::vector<int> fds;
  for (int i = 0; i < 12; ++i) {
    const int fd = connect_local(port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, kBodyNeverSent));
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int refused_first = 0;
  for (int fd : fds) {
    std::string answer;
    if (read_until(fd, "}}", 0.01, &answer) && answer.rfind("HTTP/1.1 503", 0) == 0) ++refused_first;
  }
  ASSERT_GE(refused_first, 4);
  // 40 more are each refused without waiting for the one before to linger and close (each held
  // the acceptor 0.1 s before: 4 s). One that finds a slot freed after all keeps it.
  const auto start = Clock::now();
  int refused = 0;
  for (int i = 0; i < 40; ++i) {
    const int fd = connect_local(port());
    ASSERT_GE(fd, 0);
    std::string answer;
    if (read_until(fd, "}}", 0.5, &answer) && answer.rfind("HTTP/1.1 503", 0) == 0) {
      ++refused;
      close(fd);
    } else {
      fds.push_back(fd);
    }
  }
  EXPECT_GE(refused, 38);
  EXPECT_LT(since(start), 3.0);
  for (int fd : fds) close(fd);
}

TEST(ServeQueue, RequestsWaitInTheQueueBeforeConnectionsAreRefused) {
  // The default connection limit leaves room for every slot and the whole queue: 66 requests at
  // once are 1 running, 65 waiting (before, 64 connections were the limit and the rest got 503).
  ServerProcess server({"-m", "preset:stories15M", "--device", "ref", "--slots", "1", "--max-queue", "65",
                        "--ctx", "1024"});
  ASSERT_TRUE(server.listening()) << server.log();
  std::vector<int> fds;
  for (int i = 0; i < 66; ++i) {
    const int fd = connect_local(server.port());
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
    // (Long enough, tens of seconds on the ref device, that none ends before the queue is seen full.)
    ASSERT_TRUE(send_all(fd, completion_request_bytes(R"({"prompt": [1, 500, 600], "max_tokens": 1000})")));
  }
  EXPECT_TRUE(wait_metrics(server.port(), 30, [](const Metrics& m) {
    return m.get("minfer_busy_slots") == 1 && m.get("minfer_queue_depth") == 65;
  })) << "queue depth " << metrics(server.port()).get("minfer_queue_depth");
  expect_api_error(post(server.port(), R"({"prompt": [1, 8], "max_tokens": 3})"), 429, "the queue is full");
  for (int fd : fds) close(fd);
  EXPECT_TRUE(wait_metrics(server.port(), 30, [](const Metrics& m) {
    return m.get("minfer_busy_slots") == 0 && m.get("minfer_queue_depth") == 0;
  }));
  expect_clean_exit(server);
}

#endif  // MINFER_HAVE_HTTPLIB

}  // namespace
}  // namespace minfer::test
