// Whose prompt cache a request may find (serve/serve_api.h, cache_scope; engine/block_pool.h):
// the cache_salt field at its bounds, the scope of a key and a salt, what a client is told of its
// cached tokens (whole blocks only), and, over HTTP, the attack of issue 53: a client that guesses
// the end of another client's prompt one digit at a time learns nothing from its usage, while the
// same key and salt still find their own blocks.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "serve/serve_api.h"
#include "tests/serve_http_support.h"

namespace minfer::test {
namespace {

using serve::ApiError;

const serve::ApiLimits kLimits{100, 100};

// The ApiError that `salt` (a JSON value) is refused with on each route, or nothing when both take it.
std::vector<ApiError> salt_refusals(const std::string& salt) {
  const std::string completion = R"({"prompt": [1, 2], "cache_salt": )" + salt + "}";
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}], "cache_salt": )" + salt + "}";
  std::vector<ApiError> refusals;
  try {
    const serve::CompletionRequest r = serve::parse_completion_request(completion, 10, true, kLimits);
    EXPECT_EQ(r.cache_salt, serve::parse_chat_request(chat, kLimits).cache_salt);
  } catch (const ApiError& e) {
    refusals.push_back(e);
    try {
      serve::parse_chat_request(chat, kLimits);
      ADD_FAILURE() << "the chat route took the salt the completions route refused: " << salt;
    } catch (const ApiError& chat_error) {
      refusals.push_back(chat_error);
    }
  }
  return refusals;
}

TEST(ServeCacheSalt, IsANonEmptyStringOfAtMost256Bytes) {
  const std::string longest(serve::kMaxCacheSaltBytes, 's');
  ASSERT_EQ(longest.size(), 256u);
  EXPECT_TRUE(salt_refusals("\"" + longest + "\"").empty());
  EXPECT_TRUE(salt_refusals("\"x\"").empty());
  EXPECT_TRUE(salt_refusals("null").empty());
  EXPECT_EQ(serve::parse_completion_request(R"({"prompt": [1], "cache_salt": "x"})", 10, true, kLimits).cache_salt,
            "x");
  EXPECT_FALSE(serve::parse_completion_request(R"({"prompt": [1], "cache_salt": null})", 10, true, kLimits).cache_salt);
  for (const std::string& bad : {"\"" + longest + "s\"", std::string("\"\""), std::string("42"), std::string("[\"a\"]")}) {
    const std::vector<ApiError> refusals = salt_refusals(bad);
    ASSERT_EQ(refusals.size(), 2u) << bad.substr(0, 20);
    for (const ApiError& e : refusals) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, "cache_salt");
      EXPECT_LT(e.message.size(), 80u) << "a salt is never echoed: " << e.message;
    }
  }
  EXPECT_NE(salt_refusals("\"" + longest + "s\"")[0].message.find("257 bytes"), std::string::npos);
}

TEST(ServeCacheScope, IsTheKeyAndTheSaltKeyedWithTheSecret) {
  const uint64_t secret = 0x1234;
  const std::optional<std::string> none, salt_a = "a", salt_b = "b";
  EXPECT_EQ(serve::cache_scope(secret, "", none), 0u);  // the scope every such request shares
  EXPECT_EQ(serve::cache_scope(secret, "Basic abc", none), 0u);  // not a bearer token: no key
  const uint64_t key1 = serve::cache_scope(secret, "Bearer key-1", none);
  EXPECT_NE(key1, 0u);
  EXPECT_EQ(serve::cache_scope(secret, "bearer key-1", none), key1);  // the scheme in any case
  const std::vector<uint64_t> scopes = {key1,
                                        serve::cache_scope(secret, "Bearer key-2", none),
                                        serve::cache_scope(secret, "Bearer key-1", salt_a),
                                        serve::cache_scope(secret, "Bearer key-1", salt_b),
                                        serve::cache_scope(secret, "Bearer key-2", salt_a),
                                        serve::cache_scope(secret, "", salt_a),
                                        serve::cache_scope(secret, "Bearer a", none),  // a key equal to a salt
                                        serve::cache_scope(secret + 1, "Bearer key-1", none)};
  for (size_t i = 0; i < scopes.size(); ++i) {
    EXPECT_NE(scopes[i], 0u) << i;
    for (size_t j = 0; j < i; ++j) EXPECT_NE(scopes[i], scopes[j]) << i << " and " << j;
  }
  // Keys that differ only in a byte past the first 8 (the hash takes 8 bytes at a time).
  EXPECT_NE(serve::cache_scope(secret, "Bearer 0123456789abcdef-x", none),
            serve::cache_scope(secret, "Bearer 0123456789abcdef-y", none));
  EXPECT_EQ(serve::cache_scope(secret, "", salt_a), serve::cache_scope(secret, "", std::string("a")));
}

TEST(ServeCacheScope, AClientIsToldWholeBlocksOnly) {
  EXPECT_EQ(serve::client_cached_tokens(0, 64), 0);
  EXPECT_EQ(serve::client_cached_tokens(63, 64), 0);
  EXPECT_EQ(serve::client_cached_tokens(64, 64), 64);
  EXPECT_EQ(serve::client_cached_tokens(127, 64), 64);
  EXPECT_EQ(serve::client_cached_tokens(128, 64), 128);
}

#if MINFER_HAVE_HTTPLIB

// Who sends a request: its key ("" for none) and its cache_salt.
struct Client {
  std::string key;
  std::optional<std::string> salt;
};

// The cached tokens a client's whole answer tells it for `prompt` (one token generated); -1 when
// it gets no 200.
int64_t cached_tokens(int port, const Client& who, const std::vector<int32_t>& prompt) {
  json body = {{"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}};
  if (who.salt) body["cache_salt"] = *who.salt;
  httplib::Headers headers;
  if (!who.key.empty()) headers.emplace("Authorization", "Bearer " + who.key);
  const auto answer = client(port)->Post("/v1/completions", headers, body.dump(), "application/json");
  if (!answer || answer->status != 200) {
    ADD_FAILURE() << (answer ? answer->body : std::string("no answer"));
    return -1;
  }
  return json::parse(answer->body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
}

// A prompt with a 4-digit secret at positions 60..63, the end of the first block of 64: the
// text before it is known to everyone, the text after it too ("PIN: 4711. Do not share it.").
// Ids 100..109 stand for the digits.
std::vector<int32_t> pin_prompt(const std::vector<int32_t>& pin) {
  std::vector<int32_t> prompt = {1};
  for (int i = 1; i < 60; ++i) prompt.push_back(200 + (i * 37) % 300);
  for (int32_t digit : pin) prompt.push_back(100 + digit);
  for (int i = 0; i < 10; ++i) prompt.push_back(150 + i);
  return prompt;
}

// Issue 53's attack. The victim sends its prompt; the attacker sends guesses of the PIN that
// match it in 0 to 4 digits: every digit of the last place, then wrong first, second and third
// digits. Every guess is told 0 cached tokens, the right one too. (With one scope for both, the
// right guess found the victim's whole first block, 64 tokens; before cached_tokens came in whole
// blocks, each right digit added one.) The victim, again, finds its prompt: all of it but its last
// token, told as the one whole block.
void expect_guesses_learn_nothing(int port, const Client& victim, const Client& attacker) {
  const std::vector<int32_t> pin = {4, 7, 1, 1};
  ASSERT_EQ(cached_tokens(port, victim, pin_prompt(pin)), 0);
  std::vector<std::vector<int32_t>> guesses;
  for (int32_t last = 0; last < 10; ++last) guesses.push_back({pin[0], pin[1], pin[2], last});
  for (size_t wrong = 0; wrong < 3; ++wrong) {
    std::vector<int32_t> guess = pin;
    guess[wrong] = (guess[wrong] + 5) % 10;
    guesses.push_back(guess);
  }
  for (const auto& guess : guesses)
    EXPECT_EQ(cached_tokens(port, attacker, pin_prompt(guess)), 0)
        << "guess " << guess[0] << guess[1] << guess[2] << guess[3] << (guess == pin ? " (right)" : "");
  EXPECT_EQ(cached_tokens(port, victim, pin_prompt(pin)), 64);
}

// A server without keys: a salt is a scope of its own; without one every client shares the cache.
// (Blocks for every guess of a test, so that the victim's are not evicted.)
class ServeCacheIsolation : public SharedServer<ServeCacheIsolation> {
 public:
  static std::vector<std::string> server_args() {
    return {"-m", "preset:tiny", "--ctx", "128", "--slots", "2", "--kv-cache-mib", "8"};
  }
};

TEST_F(ServeCacheIsolation, AnotherSaltLearnsNothingFromGuessesThatMatch) {
  expect_guesses_learn_nothing(port(), {"", "victim's salt"}, {"", "attacker's salt"});
}

TEST_F(ServeCacheIsolation, NoSaltGuessesLearnNothingFromASaltedPrompt) {
  expect_guesses_learn_nothing(port(), {"", "salted"}, {"", std::nullopt});
}

TEST_F(ServeCacheIsolation, WithoutKeyOrSaltEveryClientSharesTheCache) {
  std::vector<int32_t> prompt = pin_prompt({9, 9, 9, 9});
  prompt[5] = 7;  // a prompt no other test sends
  EXPECT_EQ(cached_tokens(port(), {"", std::nullopt}, prompt), 0);
  EXPECT_EQ(cached_tokens(port(), {"", std::nullopt}, prompt), 64);
  EXPECT_EQ(cached_tokens(port(), {"", "a salt"}, prompt), 0);
  EXPECT_EQ(cached_tokens(port(), {"", "a salt"}, prompt), 64);
}

TEST_F(ServeCacheIsolation, ASaltOutOfBoundsIs400AndTheServerGoesOn) {
  for (const std::string path : {"/v1/completions", "/v1/chat/completions"}) {
    json body = {{"prompt", {1, 2}},
                 {"messages", json::array({json{{"role", "user"}, {"content", "hi"}}})},
                 {"cache_salt", std::string(257, 's')}};
    body.erase(path == "/v1/completions" ? "messages" : "prompt");
    const Answer a = post(port(), body.dump(), path);
    expect_api_error(a, 400, "cache_salt has 257 bytes");
    EXPECT_EQ(a.body["error"]["param"], "cache_salt") << path;
  }
  EXPECT_EQ(post(port(), R"({"prompt": [1, 2], "max_tokens": 1, "cache_salt": "ok"})").status, 200);
}

// A server with two keys (--api-key-file, one a line): each key is a scope of its own, and a salt
// under a key another.
class ServeCacheKeys : public SharedServer<ServeCacheKeys> {
 public:
  static std::vector<std::string> server_args() {
    static ScratchDir dir("serve-cache-keys");
    const std::string key_file = dir.path() + "/keys";
    std::ofstream(key_file) << "key-of-alice\nkey-of-bob\n";
    return {"-m", "preset:tiny", "--ctx", "128", "--slots", "2", "--kv-cache-mib", "8", "--api-key-file", key_file};
  }
};

TEST_F(ServeCacheKeys, AnotherKeyLearnsNothingFromGuessesThatMatch) {
  expect_guesses_learn_nothing(port(), {"key-of-alice", std::nullopt}, {"key-of-bob", std::nullopt});
}

TEST_F(ServeCacheKeys, TheSameKeyWithAnotherSaltLearnsNothing) {
  expect_guesses_learn_nothing(port(), {"key-of-alice", "alice's salt"}, {"key-of-alice", "another salt"});
}

#endif  // MINFER_HAVE_HTTPLIB

}  // namespace
}  // namespace minfer::test
