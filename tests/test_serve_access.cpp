// Who may use `minfer serve`: the API key, the Host header and browser Origins, with CORS
// (serve/serve_access.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "core/error.h"
#include "serve/serve_access.h"
#include "tests/serve_http_support.h"
#include "tests/test_support.h"

namespace minfer::test {
namespace {

// A key file: a comment, a key with white space around it that the server trims, a blank line, a
// second key and a commented-out third.
const std::string kKeyFile = "# the keys of this server\n  s3cret-key\n\nsecond-key\n#third-key\n";

#if MINFER_HAVE_HTTPLIB

// --- Who may use it: the API key, Host and Origin (serve/serve_access.h) ---

// A raw request with extra header lines; the whole answer (the server closes after it).
std::string raw_answer(int port, const std::string& method, const std::string& path, const std::string& headers,
                       const std::string& body = "") {
  const int fd = connect_local(port);
  if (fd < 0) return "";
  std::string request = method + " " + path + " HTTP/1.1\r\n" + headers + "Connection: close\r\n";
  if (!body.empty()) request += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  send_all(fd, request + "\r\n" + body);
  std::string answer;
  read_until(fd, "\r\n\r\n{never}", 10, &answer);  // to the end: the server closes
  close(fd);
  return answer;
}

class ServeAccess : public SharedServer<ServeAccess> {
 public:
  static std::vector<std::string> server_args() {
    static ScratchDir dir("serve-access");
    const std::string key_file = dir.path() + "/key";
    std::ofstream(key_file) << kKeyFile;
    return {"-m", "preset:tiny", "--api-key-file", key_file, "--allowed-origins", "http://localhost:3000"};
  }

 protected:
  static std::string host() { return "Host: 127.0.0.1:" + std::to_string(port()) + "\r\n"; }
};
const std::string kTinyRequest = R"({"prompt": [1, 2], "max_tokens": 2})";

TEST_F(ServeAccess, EveryRouteButHealthWantsTheKey) {
  const std::string key = "Authorization: Bearer s3cret-key\r\n";
  EXPECT_EQ(raw_answer(port(), "GET", "/health", host()).rfind("HTTP/1.1 200", 0), 0u);
  for (const char* path : {"/v1/models", "/metrics", "/nowhere"}) {
    const std::string none = raw_answer(port(), "GET", path, host());
    EXPECT_EQ(none.rfind("HTTP/1.1 401", 0), 0u) << path << ": " << none;
    EXPECT_NE(none.find("WWW-Authenticate: Bearer"), std::string::npos) << none;
    EXPECT_NE(none.find("an API key is required"), std::string::npos) << none;
  }
  const std::string wrong = raw_answer(port(), "POST", "/v1/completions", host() + "Authorization: Bearer s3cret-kez\r\n",
                                       kTinyRequest);
  EXPECT_EQ(wrong.rfind("HTTP/1.1 401", 0), 0u) << wrong;
  EXPECT_NE(wrong.find("the API key is not this server's"), std::string::npos) << wrong;
  EXPECT_EQ(raw_answer(port(), "POST", "/v1/completions", host() + key, kTinyRequest).rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(raw_answer(port(), "GET", "/metrics", host() + key).rfind("HTTP/1.1 200", 0), 0u);
}

TEST_F(ServeAccess, EveryKeyOfTheFileOpensAndNoOtherLine) {
  for (const std::string key : {"s3cret-key", "second-key"}) {
    const std::string answer = raw_answer(port(), "GET", "/v1/models", host() + "Authorization: Bearer " + key + "\r\n");
    EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << key << ": " << answer;
  }
  for (const std::string line : {"#third-key", "third-key", "# the keys of this server", ""}) {
    const std::string answer = raw_answer(port(), "GET", "/v1/models", host() + "Authorization: Bearer " + line + "\r\n");
    EXPECT_EQ(answer.rfind("HTTP/1.1 401", 0), 0u) << "'" << line << "': " << answer;
  }
}

// A refused request is answered on its head: its body is never read, nor asked for.
TEST_F(ServeAccess, TheKeyIsCheckedBeforeTheBody) {
  struct Case {
    std::string name, headers;
    int status;
  };
  const std::vector<Case> cases = {
      {"no key", "", 401},
      {"a wrong key", "Authorization: Bearer s3cret-kez\r\n", 401},
      {"no key, expecting 100 Continue", "Expect: 100-continue\r\n", 401},
      {"a foreign origin", "Authorization: Bearer s3cret-key\r\nOrigin: http://evil.example\r\n", 403},
      {"a foreign origin, expecting 100 Continue",
       "Authorization: Bearer s3cret-key\r\nOrigin: http://evil.example\r\nExpect: 100-continue\r\n", 403},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const int fd = connect_local(port());
    ASSERT_GE(fd, 0);
    const auto start = Clock::now();
    // A megabyte announced and never sent: the answer cannot wait for it.
    ASSERT_TRUE(send_all(fd, "POST /v1/completions HTTP/1.1\r\n" + host() + c.headers +
                                 "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"));
    std::string answer;
    const bool closed = !read_until(fd, "\r\n\r\n{never}", 5, &answer);
    close(fd);
    EXPECT_EQ(answer.rfind("HTTP/1.1 " + std::to_string(c.status), 0), 0u) << answer;
    EXPECT_EQ(answer.find("100 Continue"), std::string::npos) << answer;
    EXPECT_TRUE(closed && since(start) < 1.5) << since(start) << " s: " << answer;
    if (c.status == 401) {
      EXPECT_NE(answer.find("WWW-Authenticate: Bearer\r\n"), std::string::npos) << answer;
    }
  }
  // With the key, the same client is asked for its body.
  const int fd = connect_local(port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, "POST /v1/completions HTTP/1.1\r\n" + host() +
                               "Authorization: Bearer second-key\r\nExpect: 100-continue\r\nContent-Length: " +
                               std::to_string(kTinyRequest.size()) + "\r\nConnection: close\r\n\r\n"));
  std::string answer;
  EXPECT_TRUE(read_until(fd, "HTTP/1.1 100 Continue\r\n\r\n", 5, &answer)) << answer;
  ASSERT_TRUE(send_all(fd, kTinyRequest));
  read_until(fd, "\r\n\r\n{never}", 10, &answer);
  close(fd);
  EXPECT_NE(answer.find("HTTP/1.1 200 OK"), std::string::npos) << answer;
}

TEST_F(ServeAccess, TwoAuthorizationHeadersAreRefused) {
  // Which one is the key? Neither: a proxy may have checked the other one.
  const std::string answer = raw_answer(port(), "GET", "/v1/models",
                                        host() + "Authorization: Bearer s3cret-key\r\nAuthorization: Bearer wrong\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << answer;
  EXPECT_NE(answer.find("more than one Authorization header"), std::string::npos) << answer;
  const std::string reversed = raw_answer(port(), "GET", "/v1/models",
                                          host() + "Authorization: Bearer wrong\r\nAuthorization: Bearer s3cret-key\r\n");
  EXPECT_EQ(reversed.rfind("HTTP/1.1 400", 0), 0u) << reversed;
}

TEST_F(ServeAccess, AHostWithBytesAfterItsNameOrLiteralIsRefused) {
  // Cut at ']' or ':', these read as loopback names, and were served.
  for (const std::string host : {"[::1]evil.com", "localhost:evil.com", "127.0.0.1:80.evil.com"}) {
    const std::string answer = raw_answer(port(), "GET", "/health", "Host: " + host + "\r\n");
    EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << host << ": " << answer;
    EXPECT_NE(answer.find("is not a host"), std::string::npos) << answer;
  }
  for (const std::string& host : {std::string("[::1]"), "[::1]:" + std::to_string(port()), std::string("localhost:"),
                                  std::string("LOCALHOST")})
    EXPECT_EQ(raw_answer(port(), "GET", "/health", "Host: " + host + "\r\n").rfind("HTTP/1.1 200", 0), 0u) << host;
}

TEST_F(ServeAccess, APreflightCarriesNoBodyAndTheSchemeIsCaseInsensitive) {
  // A body after an OPTIONS is never read as a request of its own: only a POST carries a body
  // (serve/http_framing.h).
  const std::string smuggled = "GET /v1/models HTTP/1.1\r\n" + host() + "Authorization: Bearer s3cret-key\r\n\r\n";
  const std::string with_body = raw_answer(port(), "OPTIONS", "/v1/completions", host(), smuggled);
  EXPECT_EQ(with_body.rfind("HTTP/1.1 400", 0), 0u) << with_body;
  EXPECT_NE(with_body.find("OPTIONS requests carry no body"), std::string::npos) << with_body;
  EXPECT_EQ(with_body.find("HTTP/1.1 200"), std::string::npos) << with_body;
  const std::string answer = raw_answer(port(), "OPTIONS", "/v1/completions", host());
  EXPECT_EQ(answer.rfind("HTTP/1.1 204", 0), 0u) << answer;
  EXPECT_EQ(raw_answer(port(), "GET", "/v1/models", host() + "Authorization: bearer s3cret-key\r\n").rfind("HTTP/1.1 200", 0),
            0u);
}

TEST_F(ServeAccess, AForeignHostOrOriginIsRefusedAnAllowedOriginGetsCors) {
  const std::string key = "Authorization: Bearer s3cret-key\r\n";
  // DNS rebinding: a name the attacker points at 127.0.0.1 arrives as the Host.
  const std::string rebound = raw_answer(port(), "GET", "/health", "Host: attacker.example:" + std::to_string(port()) + "\r\n");
  EXPECT_EQ(rebound.rfind("HTTP/1.1 403", 0), 0u) << rebound;
  EXPECT_NE(rebound.find("Host 'attacker.example"), std::string::npos) << rebound;
  EXPECT_EQ(raw_answer(port(), "GET", "/health", "Host: localhost\r\n").rfind("HTTP/1.1 200", 0), 0u);
  // A page elsewhere posting text/plain (no preflight) is refused before anything runs.
  const std::string foreign = raw_answer(port(), "POST", "/v1/completions",
                                         host() + key + "Origin: http://evil.example\r\nContent-Type: text/plain\r\n",
                                         kTinyRequest);
  EXPECT_EQ(foreign.rfind("HTTP/1.1 403", 0), 0u) << foreign;
  EXPECT_NE(foreign.find("Origin 'http://evil.example' is not allowed (--allowed-origins)"), std::string::npos);
  EXPECT_EQ(foreign.find("Access-Control-Allow-Origin"), std::string::npos) << foreign;
  // The allowed origin: its preflight is answered, then its request, both with CORS headers.
  const std::string origin = "Origin: http://localhost:3000\r\n";
  const std::string preflight = raw_answer(port(), "OPTIONS", "/v1/completions",
                                           host() + origin + "Access-Control-Request-Method: POST\r\n");
  EXPECT_EQ(preflight.rfind("HTTP/1.1 204", 0), 0u) << preflight;
  EXPECT_NE(preflight.find("Access-Control-Allow-Origin: http://localhost:3000"), std::string::npos) << preflight;
  EXPECT_NE(preflight.find("Access-Control-Allow-Headers: Authorization, Content-Type"), std::string::npos);
  const std::string allowed = raw_answer(port(), "POST", "/v1/completions", host() + key + origin, kTinyRequest);
  EXPECT_EQ(allowed.rfind("HTTP/1.1 200", 0), 0u) << allowed;
  EXPECT_NE(allowed.find("Access-Control-Allow-Origin: http://localhost:3000"), std::string::npos) << allowed;
  // Its page may read why it was refused, too.
  const std::string keyless = raw_answer(port(), "POST", "/v1/completions", host() + origin, kTinyRequest);
  EXPECT_EQ(keyless.rfind("HTTP/1.1 401", 0), 0u) << keyless;
  EXPECT_NE(keyless.find("Access-Control-Allow-Origin: http://localhost:3000"), std::string::npos) << keyless;
}

#endif  // MINFER_HAVE_HTTPLIB

// The key itself, on the check alone: only the very key opens, whatever part of it a guess shares.
TEST(ServeAccessKey, OnlyTheExactKeyIsAccepted) {
  const serve::AccessOptions access = serve::make_access_options("127.0.0.1", {"s3cret-key"}, "", "");
  auto status = [&](const std::string& authorization) {
    const auto refusal = serve::check_access(access, "localhost", "", authorization, true);
    return refusal ? refusal->status : 200;
  };
  EXPECT_EQ(status("Bearer s3cret-key"), 200);
  EXPECT_EQ(status("bEaReR s3cret-key"), 200);  // the scheme's name is case-insensitive
  for (const std::string wrong : {"s3cret-ke", "s3cret-keyX", "s3cret-key ", "s", "S3CRET-KEY", "s3cret-kez",
                                  "xs3cret-key", "s3cret-keys3cret-key"})
    EXPECT_EQ(status("Bearer " + wrong), 401) << "'" << wrong << "'";
  EXPECT_EQ(status("Bearer s3cret-key" + std::string(1, '\0')), 401);
  EXPECT_EQ(status("Bearer "), 401);
  EXPECT_EQ(status("Bearer"), 401);
  EXPECT_EQ(status("Basic s3cret-key"), 401);
  EXPECT_EQ(status("s3cret-key"), 401);
  EXPECT_EQ(status(""), 401);
  // /health wants none.
  EXPECT_FALSE(serve::check_access(access, "localhost", "", "", false));
}

TEST(ServeAccessKey, AKeyFileHoldsOneKeyALineAndEachOpens) {
  ScratchDir dir("serve-keys");
  const std::string path = dir.path() + "/keys";
  std::ofstream(path) << kKeyFile;
  const std::vector<std::string> keys = serve::read_api_key_file(path);
  EXPECT_EQ(keys, (std::vector<std::string>{"s3cret-key", "second-key"}));
  const serve::AccessOptions access = serve::make_access_options("127.0.0.1", keys, "", "");
  auto status = [&](const std::string& authorization) {
    const auto refusal = serve::check_access(access, "localhost", "", authorization, true);
    return refusal ? refusal->status : 200;
  };
  EXPECT_EQ(status("Bearer s3cret-key"), 200);
  EXPECT_EQ(status("Bearer second-key"), 200);
  EXPECT_EQ(status("Bearer third-key"), 401);
  EXPECT_EQ(status("Bearer #third-key"), 401);
  // A file of comments and blank lines holds no key: an error that names it, not a server without one.
  std::ofstream(path) << "# nothing yet\n\n   \n";
  try {
    (void)serve::read_api_key_file(path);
    ADD_FAILURE() << "no error for a file without keys";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + " holds no key"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace minfer::test
