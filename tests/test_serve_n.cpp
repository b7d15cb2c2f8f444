// `n` on /v1/completions and /v1/chat/completions, against real server processes: n choices, each a
// request of the scheduler's with its own generator (choice i draws what n = 1 with seed + i
// draws), the prompt computed once and its blocks shared, streams whose events carry their
// choice's index, usage that counts the prompt once; n from 1 to 8, each choice a place of the
// queue, all queued or none; a client that goes cancels every choice.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <set>
#include <thread>

#include "serve/serve_api.h"
#include "tests/serve_http_support.h"
#include "tests/test_support.h"

namespace minfer::test {
namespace {

// Choice i's sampler state is seed + i, wrapping, and never 0 (run.c's xorshift would stick there).
TEST(ServeChoiceSeed, ChoiceIIsSeedPlusIAndNeverZero) {
  EXPECT_EQ(serve::choice_seed(5, 0), 5u);
  EXPECT_EQ(serve::choice_seed(5, 7), 12u);
  EXPECT_EQ(serve::choice_seed(~uint64_t(0), 1), serve::kSeedZeroState);
  EXPECT_EQ(serve::choice_seed(~uint64_t(0), 2), 1u);
  const serve::ApiLimits limits{64, 64};
  EXPECT_EQ(serve::parse_completion_request(R"({"prompt": [1], "n": 8})", 100, false, limits).n, 8);
  EXPECT_EQ(serve::parse_completion_request(R"({"prompt": [1]})", 100, false, limits).n, 1);
}

#if MINFER_HAVE_HTTPLIB

const std::string kChatModel = MINFER_SOURCE_DIR "/tests/data/models/smollm-chat";

class ServeChoices : public SharedServer<ServeChoices> {
 public:
  static std::vector<std::string> server_args() {
    return {"-m", kChatModel, "--slots", "4", "--ctx", "512", "--max-tokens-limit", "64"};
  }
};

std::string text_of(const json& choice) {
  return choice.contains("text") ? choice["text"].get<std::string>() : choice["message"]["content"].get<std::string>();
}

TEST_F(ServeChoices, ChoiceIDrawsWhatNOneWithSeedPlusIDraws) {
  // (Near-uniform draws: the fixture's random weights are too sure of themselves at temperature 1.)
  json request = {{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 1e6}, {"seed", 7}, {"n", 3}};
  Answer a = post(port(), request.dump());
  ASSERT_EQ(a.status, 200) << a.raw;
  ASSERT_EQ(a.body["choices"].size(), 3u) << a.raw;
  int64_t generated = 0;
  std::set<std::string> texts;
  for (int i = 0; i < 3; ++i) {
    const json& choice = a.body["choices"][i];
    EXPECT_EQ(choice["index"], i);
    request["n"] = 1;
    request["seed"] = 7 + i;
    Answer alone = post(port(), request.dump());
    ASSERT_EQ(alone.status, 200) << alone.raw;
    EXPECT_EQ(choice["token_ids"], alone.body["choices"][0]["token_ids"]) << "choice " << i;
    EXPECT_EQ(choice["text"], alone.body["choices"][0]["text"]) << "choice " << i;
    EXPECT_EQ(a.body["usage"]["prompt_tokens"], alone.body["usage"]["prompt_tokens"]);
    generated += static_cast<int64_t>(choice["token_ids"].size());
    texts.insert(text_of(choice));
  }
  EXPECT_EQ(a.body["usage"]["completion_tokens"], generated);
  EXPECT_EQ(a.body["usage"]["total_tokens"], a.body["usage"]["prompt_tokens"].get<int64_t>() + generated);
  EXPECT_GT(texts.size(), 1u) << "three seeds drew the same text: " << a.raw;
}

TEST_F(ServeChoices, TheChatRouteAnswersNMessages) {
  const json request = {{"messages", {{{"role", "user"}, {"content", "Hello there"}}}},
                        {"max_tokens", 10},
                        {"temperature", 0},
                        {"n", 2}};
  Answer a = post(port(), request.dump(), "/v1/chat/completions");
  ASSERT_EQ(a.status, 200) << a.raw;
  ASSERT_EQ(a.body["choices"].size(), 2u) << a.raw;
  json single = request;
  single["n"] = 1;
  Answer alone = post(port(), single.dump(), "/v1/chat/completions");
  ASSERT_EQ(alone.status, 200) << alone.raw;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(a.body["choices"][i]["index"], i);
    EXPECT_EQ(a.body["choices"][i]["message"]["role"], "assistant");
    EXPECT_EQ(text_of(a.body["choices"][i]), text_of(alone.body["choices"][0])) << "greedy choices agree";
  }
  EXPECT_EQ(a.body["usage"]["completion_tokens"], 2 * alone.body["usage"]["completion_tokens"].get<int64_t>());
}

TEST_F(ServeChoices, NIsOneToEight) {
  Answer eight = post(port(), R"({"prompt": "a", "max_tokens": 2, "n": 8})");
  ASSERT_EQ(eight.status, 200) << eight.raw;
  ASSERT_EQ(eight.body["choices"].size(), 8u);
  EXPECT_EQ(eight.body["choices"][7]["index"], 7);
  EXPECT_EQ(eight.body["usage"]["completion_tokens"], 16);
  expect_api_error(post(port(), R"({"prompt": "a", "max_tokens": 2, "n": 9})"), 400, "n = 9: 1 to 8 choices");
  expect_api_error(post(port(), R"({"prompt": "a", "max_tokens": 2, "n": 0})"), 400, "n = 0: 1 to 8 choices");
  expect_api_error(post(port(), R"({"prompt": "a", "n": "2"})"), 400, "n must be an integer");
  expect_api_error(post(port(), R"({"prompt": "a", "n": 2, "best_of": 2})"), 400, "best_of is not supported");
  expect_api_error(post(port(), R"({"messages": [{"role": "user", "content": "a"}], "n": 9})",
                        "/v1/chat/completions"),
                   400, "n = 9");
  EXPECT_EQ(post(port(), R"({"prompt": "a", "max_tokens": 2, "n": null})").status, 200);
}

// The choices are requests of one cache scope with one prompt: the first computes it, the others
// wait for its full blocks (64 positions each) and compute only the rest. Usage counts the prompt
// once, and the request as a whole found none of it cached.
TEST_F(ServeChoices, ThePromptIsComputedOnce) {
  constexpr int64_t kPrompt = 200, kBlock = 64, kN = 4;
  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < kPrompt; ++i) prompt.push_back(static_cast<int32_t>(100 + (i * 37) % 400));
  const json request = {{"prompt", prompt},      {"max_tokens", 2}, {"temperature", 0},
                        {"cache_salt", "n-test"}, {"n", kN}};
  const Metrics before = metrics(port());
  Answer a = post(port(), request.dump());
  ASSERT_EQ(a.status, 200) << a.raw;
  const Metrics after = metrics(port());
  const double computed = after.get("minfer_prompt_tokens_total") - before.get("minfer_prompt_tokens_total");
  const double cached =
      after.get("minfer_prompt_tokens_cached_total") - before.get("minfer_prompt_tokens_cached_total");
  const int64_t full = kPrompt / kBlock * kBlock;
  EXPECT_LE(computed, kPrompt + (kN - 1) * (kPrompt - full)) << "cached " << cached;
  EXPECT_GE(cached, (kN - 1) * full) << "computed " << computed;
  EXPECT_EQ(a.body["usage"]["prompt_tokens"], kPrompt);
  EXPECT_EQ(a.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

// Every event carries its choice's index; each choice's events add up to its whole answer, end
// with one finish_reason, and the last event's usage counts every choice's tokens.
TEST_F(ServeChoices, StreamEventsCarryTheirChoicesIndex) {
  for (const std::string route : {"/v1/completions", "/v1/chat/completions"}) {
    SCOPED_TRACE(route);
    json request = {{"max_tokens", 10}, {"temperature", 1e6}, {"seed", 11}, {"n", 3}};
    if (route == "/v1/completions") request["prompt"] = "The cat";
    else request["messages"] = {{{"role", "user"}, {"content", "The cat"}}};
    Answer whole = post(port(), request.dump(), route);
    ASSERT_EQ(whole.status, 200) << whole.raw;
    request["stream"] = true;
    Answer streamed = post(port(), request.dump(), route);
    ASSERT_EQ(streamed.status, 200) << streamed.raw;
    const SseEvents sse = parse_sse(streamed.raw);
    ASSERT_TRUE(sse.well_formed && sse.done) << streamed.raw;
    std::map<int, std::string> texts;
    std::map<int, int> finishes, roles;
    for (const json& e : sse.events) {
      if (e["choices"].empty()) continue;
      ASSERT_EQ(e["choices"].size(), 1u);
      const json& c = e["choices"][0];
      const int i = c["index"];
      EXPECT_EQ(finishes[i], 0) << "an event after choice " << i << "'s last";
      if (c.contains("delta") && c["delta"].contains("role")) {
        EXPECT_TRUE(texts[i].empty()) << "the role opens choice " << i;
        ++roles[i];
      }
      const json& part = c.contains("text") ? c["text"] : c["delta"].value("content", json(""));
      texts[i] += part.get<std::string>();
      if (!c["finish_reason"].is_null()) ++finishes[i];
    }
    ASSERT_EQ(texts.size(), 3u) << streamed.raw;
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(texts[i], text_of(whole.body["choices"][i])) << "choice " << i;
      EXPECT_EQ(finishes[i], 1) << "choice " << i;
      EXPECT_EQ(roles[i], route == "/v1/completions" ? 0 : 1) << "choice " << i;
    }
    const json& last = sse.events.back();
    EXPECT_EQ(last["usage"]["completion_tokens"], whole.body["usage"]["completion_tokens"]) << streamed.raw;
  }
}

// --- A slow model (the reference backend): the queue, and clients that go ---

class ServeChoicesSlow : public SharedServer<ServeChoicesSlow> {
 public:
  static std::vector<std::string> server_args() {
    return {"-m", "preset:stories15M", "--device", "ref", "--slots", "1", "--max-queue", "4", "--ctx", "256"};
  }

 protected:
  static double cancelled() { return metrics(port()).get("minfer_requests_finished_total{reason=\"cancelled\"}"); }
};

// Each choice takes a place of the queue: n past --max-queue can never be queued (400); n that
// finds too few places is refused whole (429), and the choices it had queued leave the queue; n
// equal to --max-queue runs on an empty queue.
TEST_F(ServeChoicesSlow, EachChoiceIsAPlaceOfTheQueueAllQueuedOrNone) {
  expect_api_error(post(port(), R"({"prompt": [1, 7], "max_tokens": 2, "n": 5})"), 400, "--max-queue");
  const int busy = connect_local(port());
  ASSERT_GE(busy, 0);
  ASSERT_TRUE(send_all(busy, completion_request_bytes(kLongRequest)));
  ASSERT_TRUE(wait_metrics(port(), 30, [](const Metrics& m) {
    return m.get("minfer_busy_slots") == 1 && m.get("minfer_queue_depth") == 0;
  }));
  Answer queued;
  std::thread waiting([&] { queued = post(port(), R"({"prompt": [1, 7], "max_tokens": 2})"); });
  ASSERT_TRUE(wait_metrics(port(), 30, [](const Metrics& m) { return m.get("minfer_queue_depth") == 1; }));
  expect_api_error(post(port(), R"({"prompt": [1, 8], "max_tokens": 2, "n": 4})"), 429, "the queue is full");
  EXPECT_TRUE(wait_metrics(port(), 5, [](const Metrics& m) { return m.get("minfer_queue_depth") == 1; }))
      << "the refused request's choices are still queued: " << metrics(port()).get("minfer_queue_depth");
  close(busy);
  waiting.join();
  EXPECT_EQ(queued.status, 200) << queued.raw;
  Answer four = post(port(), R"({"prompt": [1, 8], "max_tokens": 2, "n": 4})");
  ASSERT_EQ(four.status, 200) << four.raw;
  EXPECT_EQ(four.body["choices"].size(), 4u);
}

// A stream's client that goes cancels every choice: the one running and the one queued.
TEST_F(ServeChoicesSlow, AClientThatGoesCancelsEveryChoice) {
  ASSERT_TRUE(wait_metrics(port(), 30, [](const Metrics& m) { return m.get("minfer_busy_slots") == 0; }));
  const double before = cancelled();
  const int fd = connect_local(port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, completion_request_bytes(
                               R"({"prompt": [1, 500, 600], "max_tokens": 250, "temperature": 0, "stream": true, "n": 2})")));
  std::string received;
  ASSERT_TRUE(read_until(fd, "data: ", 30, &received)) << received;
  close(fd);
  EXPECT_TRUE(wait_metrics(port(), 20, [&](const Metrics& m) {
    return m.get("minfer_requests_finished_total{reason=\"cancelled\"}") == before + 2 &&
           m.get("minfer_busy_slots") == 0 && m.get("minfer_queue_depth") == 0;
  })) << "cancelled " << cancelled() - before;
}

#else

TEST(ServeChoices, SkippedWithoutHttplib) {
  GTEST_SKIP() << "skipped: this build has no cpp-httplib (apt-get install libcpp-httplib-dev)";
}

#endif  // MINFER_HAVE_HTTPLIB

}  // namespace
}  // namespace minfer::test
