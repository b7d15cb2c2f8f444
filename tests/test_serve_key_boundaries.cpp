// The API key at its boundaries, over HTTP, on a server given its key with --api-key (the key
// file and the check alone are tests/test_serve_access.cpp's): a guess of the key's length that
// differs in every byte, in its first byte only, or in its last byte only, the key less its last
// byte, the key and one byte more, and the key twice are each answered 401 on a POST and a GET,
// and the very key still opens both afterwards. A check that compared only a prefix, only the
// guess's own length, or only up to the first difference, lets one of them in.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/serve_http_support.h"

namespace minfer::test {
namespace {

#if MINFER_HAVE_HTTPLIB

// 32 bytes: longer than one 8- or 16-byte word, so that a comparison of the first word only is
// told apart from one of every byte.
const std::string kKey = "k3y-0123456789abcdefghijklmnopqr";

class ServeKeyBoundaries : public SharedServer<ServeKeyBoundaries> {
 public:
  static std::vector<std::string> server_args() { return {"-m", "preset:tiny", "--api-key", kKey}; }

 protected:
  // The status of a POST /v1/completions and of a GET /v1/models sent with `key` as the bearer.
  static std::pair<int, int> statuses(const std::string& key) {
    const httplib::Headers headers = {{"Authorization", "Bearer " + key}};
    auto c = client(port());
    const auto posted =
        c->Post("/v1/completions", headers, R"({"prompt": [1, 2], "max_tokens": 1})", "application/json");
    const auto got = c->Get("/v1/models", headers);
    return {posted ? posted->status : -1, got ? got->status : -1};
  }
};

TEST_F(ServeKeyBoundaries, OnlyEveryByteOfTheKeyOpens) {
  ASSERT_EQ(kKey.size(), 32u);
  std::string every_byte = kKey, first_byte = kKey, last_byte = kKey;
  for (char& ch : every_byte) ch = static_cast<char>(ch == 'x' ? 'y' : 'x');
  first_byte.front() = 'K';
  last_byte.back() = 's';
  const std::vector<std::pair<std::string, std::string>> guesses = {
      {"the key's length, every byte different", every_byte},
      {"the key's length, the first byte different", first_byte},
      {"the key's length, the last byte different", last_byte},
      {"the key less its last byte", kKey.substr(0, kKey.size() - 1)},
      {"the key and one byte more", kKey + "s"},
      {"the key twice", kKey + kKey},
  };
  for (const auto& [what, guess] : guesses) {
    ASSERT_EQ(guess.size() == kKey.size(), what.rfind("the key's length", 0) == 0) << what;
    EXPECT_EQ(statuses(guess), std::make_pair(401, 401)) << what << ": '" << guess << "'";
  }
  // The server still serves, and the very key opens both routes.
  EXPECT_EQ(statuses(kKey), std::make_pair(200, 200));
}

#else
TEST(ServeKeyBoundaries, OnlyEveryByteOfTheKeyOpens) { GTEST_SKIP() << "skipped: built without cpp-httplib"; }
#endif  // MINFER_HAVE_HTTPLIB

}  // namespace
}  // namespace minfer::test
