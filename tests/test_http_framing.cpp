// The server's front door (serve/http_framing.h) on bytes, without sockets: every way a request
// could be read two ways (issue 37) is refused, the canonical request httplib is handed has one
// meaning, and a chunked body decodes the same however its bytes are split. The same cases against
// a live server: test_serve_abuse.cpp.
#include <gtest/gtest.h>

#include <string>

#include "serve/http_framing.h"

namespace minfer::test {
namespace {

using serve::ChunkedDecoder;
using serve::FramingLimits;
using serve::Refusal;
using serve::RequestHead;

struct Parsed {
  bool ok = false;
  RequestHead head;
  Refusal refusal;
};

Parsed parse(const std::string& head, FramingLimits limits = {}) {
  Parsed p;
  p.ok = serve::parse_request_head(head, limits, p.head, p.refusal);
  return p;
}

// `head` is refused with `status`, and the message says `fragment`.
void expect_refused(const std::string& head, int status, const std::string& fragment) {
  const Parsed p = parse(head);
  EXPECT_FALSE(p.ok) << head;
  EXPECT_EQ(p.refusal.status, status) << head << " -> " << p.refusal.message;
  EXPECT_NE(p.refusal.message.find(fragment), std::string::npos) << head << " -> " << p.refusal.message;
}

const std::string kPost = "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n";

TEST(HttpFraming, APlainRequestBecomesItsCanonicalForm) {
  const Parsed p = parse("GET /health HTTP/1.1\r\nHost: localhost:8080\r\nAccept: */*\r\n\r\n");
  ASSERT_TRUE(p.ok) << p.refusal.message;
  EXPECT_EQ(p.head.method, "GET");
  EXPECT_EQ(p.head.body, RequestHead::Body::none);
  EXPECT_FALSE(p.head.close);
  EXPECT_EQ(serve::canonical_request(p.head, ""),
            "GET /health HTTP/1.1\r\nHost: localhost:8080\r\nAccept: */*\r\nContent-Length: 0\r\n\r\n");
}

TEST(HttpFraming, ABodyIsOnlyWhatItsFramingSays) {
  Parsed p = parse(kPost + "Content-Length: 0012\r\n\r\n");
  ASSERT_TRUE(p.ok) << p.refusal.message;
  EXPECT_EQ(p.head.body, RequestHead::Body::length);
  EXPECT_EQ(p.head.content_length, 12u);
  p = parse(kPost + "Transfer-Encoding: Chunked\r\n\r\n");
  ASSERT_TRUE(p.ok) << p.refusal.message;
  EXPECT_EQ(p.head.body, RequestHead::Body::chunked);
  // Neither: the body is empty (RFC 9112, 6.3), not read until a timeout.
  p = parse(kPost + "\r\n");
  ASSERT_TRUE(p.ok) << p.refusal.message;
  EXPECT_EQ(p.head.body, RequestHead::Body::none);
  // Two equal lengths are one length.
  EXPECT_TRUE(parse(kPost + "Content-Length: 4\r\nContent-Length: 4\r\n\r\n").ok);
}

TEST(HttpFraming, AmbiguousFramingIsRefused) {
  expect_refused(kPost + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "both Transfer-Encoding");
  expect_refused(kPost + "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n", 400, "both Transfer-Encoding");
  expect_refused(kPost + "Transfer-Encoding: gzip, chunked\r\n\r\n", 501, "only chunked");
  expect_refused(kPost + "Transfer-Encoding: xchunked\r\n\r\n", 501, "only chunked");
  expect_refused(kPost + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501, "only chunked");
  expect_refused("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "HTTP/1.0");
  expect_refused(kPost + "Content-Length: 4\r\nContent-Length: 5\r\n\r\n", 400, "two different Content-Length");
  expect_refused(kPost + "Content-Length: 4, 4\r\n\r\n", 400, "not a number of bytes");
  // Header values are not percent-decoded: "4%36" is not 46.
  expect_refused(kPost + "Content-Length: 4%36\r\n\r\n", 400, "not a number of bytes");
  expect_refused(kPost + "Content-Length: +4\r\n\r\n", 400, "not a number of bytes");
  expect_refused(kPost + "Content-Length: 99999999999999999999999\r\n\r\n", 413, "over the limit");
}

TEST(HttpFraming, OnlyAPostCarriesABody) {
  expect_refused("GET /health HTTP/1.1\r\nHost: a\r\nContent-Length: 30\r\n\r\n", 400, "GET requests carry no body");
  expect_refused("GET /health HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "carry no body");
  EXPECT_TRUE(parse("GET /health HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n").ok);
}

TEST(HttpFraming, HeaderLinesAreReadStrictly) {
  expect_refused(kPost + "Content-Length : 4\r\n\r\n", 400, "whitespace between a header's name and its ':'");
  expect_refused(kPost + "X-A: 1\r\n folded\r\n\r\n", 400, "obsolete line folding");
  expect_refused("GET / HTTP/1.1\r\nHost: a\nX-A: 1\r\n\r\n", 400, "bare LF");
  expect_refused("GET / HTTP/1.1\r\nHost: a\r\n\n", 400, "bare LF");
  expect_refused("GET / HTTP/1.1\r\nHost: a\rX: 1\r\n\r\n", 400, "bare CR");
  expect_refused("GET / HTTP/1.1\r\nHost: localhost" + std::string(1, '\0') + ".evil\r\n\r\n", 400, "control byte");
  expect_refused("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x01z\r\n\r\n", 400, "control byte");
  expect_refused("GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n", 400, "no ':'");
  expect_refused("GET / HTTP/1.1\r\nHost: a\r\n: x\r\n\r\n", 400, "no name");
  expect_refused("GET / HTTP/1.1\r\nHost: a\r\nX(A): 1\r\n\r\n", 400, "not a token");
  expect_refused("GET / HTTP/1.1\r\nHost: a\r\n", 400, "does not end in a blank line");
}

TEST(HttpFraming, TheRequestLineIsReadStrictly) {
  expect_refused("GET  /health HTTP/1.1\r\nHost: a\r\n\r\n", 400, "request line");
  expect_refused("GET /health HTTP/1.1 x\r\nHost: a\r\n\r\n", 400, "request line");
  expect_refused("G@T /health HTTP/1.1\r\nHost: a\r\n\r\n", 400, "not a token");
  expect_refused("GET /health HTTP/2.0\r\nHost: a\r\n\r\n", 505, "not supported");
  expect_refused("GET /health http/1.1\r\nHost: a\r\n\r\n", 400, "request line");
  expect_refused("GET /he\x7fllo HTTP/1.1\r\nHost: a\r\n\r\n", 400, "not visible ASCII");
  expect_refused("GET health HTTP/1.1\r\nHost: a\r\n\r\n", 400, "neither a path nor an http URL");
  expect_refused("\r\n", 400, "no request line");
  expect_refused("GET /" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: a\r\n\r\n", 414, "request line is over 8192");
}

TEST(HttpFraming, TheRequestLineLimitCountsItsCrlf) {
  // "GET " + target + " HTTP/1.1" + CRLF: 8192 bytes in all pass, 8193 do not.
  const std::string at_limit = "GET /" + std::string(8176, 'a') + " HTTP/1.1\r\n";
  ASSERT_EQ(at_limit.size(), FramingLimits{}.max_line_bytes);
  const Parsed p = parse(at_limit + "Host: a\r\n\r\n");
  EXPECT_TRUE(p.ok) << p.refusal.message;
  expect_refused("GET /" + std::string(8177, 'a') + " HTTP/1.1\r\nHost: a\r\n\r\n", 414, "request line is over 8192");
}

TEST(HttpFraming, AHeaderLineLimitCountsItsCrlf) {
  // "X-Big: " + value + CRLF, as httplib is handed it: 8192 bytes pass, 8193 do not.
  const std::string at_limit = "X-Big: " + std::string(8183, 'v') + "\r\n";
  ASSERT_EQ(at_limit.size(), FramingLimits{}.max_line_bytes);
  const Parsed p = parse("GET / HTTP/1.1\r\nHost: a\r\n" + at_limit + "\r\n");
  EXPECT_TRUE(p.ok) << p.refusal.message;
  expect_refused("GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(8184, 'v') + "\r\n\r\n", 431,
                 "the limit of one header line");
  // Host, which the front door writes itself as "Host: " + value + CRLF, likewise.
  EXPECT_TRUE(parse("GET / HTTP/1.1\r\nHost: " + std::string(8184, 'h') + "\r\n\r\n").ok);
  expect_refused("GET / HTTP/1.1\r\nHost: " + std::string(8185, 'h') + "\r\n\r\n", 431, "the limit of one header line");
}

TEST(HttpFraming, HostIsANameOrAnAddressAndAPortOnly) {
  for (const std::string host : {"[::1]evil.com", "localhost:evil.com", "localhost:80evil", "[::1]:80:80",
                                 "localhost:8080:", "localhost:65536", "localhost:123456", "localhost:-1", ":8080",
                                 "[::1", "[]", "[1.2.3.4]", "[::1%25lo]", "[::g]", "user@localhost", "a/b", "a]",
                                 "local[host]"})
    expect_refused("GET / HTTP/1.1\r\nHost: " + host + "\r\n\r\n", 400, "is not a host");
  expect_refused("GET http://localhost:evil.com/ HTTP/1.1\r\nHost: a\r\n\r\n", 400, "is not a host");
  expect_refused("GET http://[::1]evil.com/ HTTP/1.1\r\nHost: a\r\n\r\n", 400, "is not a host");
  // An empty port is RFC 3986's (port = *DIGIT): "localhost:" is "localhost".
  for (const std::string host : {"localhost", "localhost:8080", "localhost:", "127.0.0.1:65535", "[::1]", "[::1]:0",
                                 "[::1]:", "[::ffff:127.0.0.1]:80", "LocalHost", "my-host.example_1~!$&'()*+,;="}) {
    const Parsed p = parse("GET / HTTP/1.1\r\nHost: " + host + "\r\n\r\n");
    EXPECT_TRUE(p.ok) << host << ": " << p.refusal.message;
    EXPECT_EQ(p.head.host, host);
  }
}

TEST(HttpFraming, AuthorizationComesOnceAndIsKeptForTheHandler) {
  expect_refused("GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer k1\r\nauthorization: Bearer k2\r\n\r\n", 400,
                 "more than one Authorization header");
  const Parsed p = parse("GET /v1/models?x=1 HTTP/1.1\r\nHost: a:1\r\nAuthorization: Bearer k1\r\n"
                         "Origin: http://o\r\nOrigin: http://p\r\n\r\n");
  ASSERT_TRUE(p.ok) << p.refusal.message;
  EXPECT_EQ(p.head.authorization, "Bearer k1");
  EXPECT_EQ(p.head.origin, "http://o");
  EXPECT_EQ(p.head.host, "a:1");
  EXPECT_EQ(p.head.target, "/v1/models?x=1");
  EXPECT_NE(p.head.canonical.find("Authorization: Bearer k1\r\n"), std::string::npos) << p.head.canonical;
}

TEST(HttpFraming, ABodyIsTakenAsSentContentEncodingIsRefused) {
  for (const std::string coding : {"gzip", "deflate", "br", "GZIP", "x-gzip", "identity, gzip", "compress"}) {
    const Parsed p = parse(kPost + "Content-Encoding: " + coding + "\r\nContent-Length: 20\r\n\r\n");
    EXPECT_FALSE(p.ok) << coding;
    EXPECT_EQ(p.refusal.status, 415) << coding << ": " << p.refusal.message;
    EXPECT_NE(p.refusal.message.find("is not supported (bodies are read as sent: only identity)"), std::string::npos)
        << p.refusal.message;
    EXPECT_EQ(p.refusal.headers, "Accept-Encoding: identity\r\n");
  }
  // identity is no coding: it passes, and httplib is never handed a Content-Encoding.
  const Parsed p = parse(kPost + "Content-Encoding: Identity\r\nContent-Encoding: identity, identity\r\n"
                                 "Content-Length: 20\r\n\r\n");
  ASSERT_TRUE(p.ok) << p.refusal.message;
  EXPECT_EQ(p.head.canonical.find("Content-Encoding"), std::string::npos) << p.head.canonical;
}

TEST(HttpFraming, HostIsThereOnceInHttp11) {
  expect_refused("GET /health HTTP/1.1\r\n\r\n", 400, "without a Host");
  expect_refused("GET /health HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400, "more than one Host");
  expect_refused("GET /health HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "is not a host");
  expect_refused("GET /health HTTP/1.1\r\nHost: local%68ost\r\n\r\n", 400, "is not a host");
  expect_refused("GET /health HTTP/1.1\r\nHost: " + std::string(9000, 'h') + "\r\n\r\n", 431, "the limit of one header line");
  EXPECT_TRUE(parse("GET /health HTTP/1.0\r\n\r\n").ok);
  EXPECT_TRUE(parse("GET /health HTTP/1.1\r\nHost:\r\n\r\n").ok);
}

TEST(HttpFraming, AnAbsoluteTargetBecomesAPathAndItsAuthorityTheHost) {
  Parsed p = parse("GET http://localhost:8080/v1/models?x=1 HTTP/1.1\r\nHost: other\r\n\r\n");
  ASSERT_TRUE(p.ok) << p.refusal.message;
  EXPECT_EQ(p.head.canonical, "GET /v1/models?x=1 HTTP/1.1\r\nHost: localhost:8080\r\n");
  p = parse("GET HTTPS://localhost HTTP/1.1\r\nHost: localhost\r\n\r\n");
  ASSERT_TRUE(p.ok) << p.refusal.message;
  EXPECT_EQ(p.head.canonical, "GET / HTTP/1.1\r\nHost: localhost\r\n");
  expect_refused("GET http://user@localhost/ HTTP/1.1\r\nHost: localhost\r\n\r\n", 400, "is not a host");
  expect_refused("GET ftp://localhost/ HTTP/1.1\r\nHost: localhost\r\n\r\n", 400, "neither a path");
}

TEST(HttpFraming, TheCanonicalHeadSaysWhatTheClientMeant) {
  // Connection's options in any case and list; Keep-Alive only for an HTTP/1.0 client that asks.
  Parsed p = parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Close\r\n\r\n");
  ASSERT_TRUE(p.ok);
  EXPECT_TRUE(p.head.close);
  EXPECT_EQ(p.head.canonical, "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n");
  p = parse("GET / HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(p.head.close);
  p = parse("GET / HTTP/1.0\r\nConnection: KEEP-ALIVE\r\n\r\n");
  EXPECT_FALSE(p.head.close);
  EXPECT_EQ(p.head.canonical, "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n");
  // Range and If-Range are dropped; '%' goes as "%25", which httplib decodes back to '%'.
  p = parse("GET / HTTP/1.1\r\nHost: a\r\nRange: bytes=0-9\r\nIf-Range: x\r\nX-Key: 100%25\r\n\r\n");
  ASSERT_TRUE(p.ok);
  EXPECT_EQ(p.head.canonical, "GET / HTTP/1.1\r\nHost: a\r\nX-Key: 100%2525\r\n");
  // Expect: the front door sends the 100 Continue itself, only to an HTTP/1.1 client with a body.
  p = parse(kPost + "Expect: 100-Continue\r\nContent-Length: 3\r\n\r\n");
  ASSERT_TRUE(p.ok);
  EXPECT_TRUE(p.head.expects_continue);
  EXPECT_EQ(p.head.canonical.find("Expect"), std::string::npos);
  EXPECT_FALSE(parse("POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n").head.expects_continue);
  expect_refused(kPost + "Expect: something-else\r\n\r\n", 417, "only 100-continue");
}

TEST(HttpFraming, AHeaderLineLongerThanHttplibTakesIs431) {
  expect_refused("GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(9000, 'a') + "\r\n\r\n", 431,
                 "over 8192 bytes (the limit of one header line)");
  // Counted as httplib is handed it: each '%' is three bytes there.
  expect_refused("GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(3000, '%') + "\r\n\r\n", 431, "X-Big");
  EXPECT_TRUE(parse("GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(8000, 'a') + "\r\n\r\n").ok);
}

TEST(HttpFraming, ErrorMessagesShowAClientsBytesCutAndFlat) {
  const Parsed p = parse(kPost + "Content-Length: " + std::string(5000, 'x') + "\r\n\r\n");
  ASSERT_FALSE(p.ok);
  EXPECT_LT(p.refusal.message.size(), 200u);
}

// --- Chunked bodies ---

struct Decoded {
  ChunkedDecoder::State state = ChunkedDecoder::State::more;
  std::string body;
  size_t used = 0;  // bytes taken in all
  Refusal refusal;
};

// Feeds `bytes` `piece` bytes at a time, until the decoder is done or refuses.
Decoded decode(const std::string& bytes, size_t piece, FramingLimits limits = {}) {
  ChunkedDecoder decoder(limits);
  Decoded d;
  for (size_t at = 0; at < bytes.size() && d.state == ChunkedDecoder::State::more;) {
    const size_t n = std::min(piece, bytes.size() - at);
    size_t used = 0;
    d.state = decoder.feed(bytes.data() + at, n, used, d.body);
    EXPECT_TRUE(used == n || d.state != ChunkedDecoder::State::more);
    at += used;
    d.used = at;
  }
  d.refusal = decoder.refusal();
  return d;
}

void expect_chunks_refused(const std::string& bytes, int status, const std::string& fragment) {
  for (size_t piece : {size_t(1), size_t(3), bytes.size()}) {
    const Decoded d = decode(bytes, piece);
    EXPECT_EQ(d.state, ChunkedDecoder::State::refused) << bytes.substr(0, 60);
    EXPECT_EQ(d.refusal.status, status) << bytes.substr(0, 60) << " -> " << d.refusal.message;
    EXPECT_NE(d.refusal.message.find(fragment), std::string::npos) << d.refusal.message;
  }
}

TEST(HttpFraming, AChunkedBodyDecodesTheSameHoweverItArrives) {
  const std::string bytes = "5;name=value\r\nhello\r\n1A\r\n" + std::string(26, 'z') +
                            "\r\n0\r\nTrailer: x\r\n\r\nGET /next HTTP/1.1\r\n";
  for (size_t piece = 1; piece <= bytes.size(); ++piece) {
    const Decoded d = decode(bytes, piece);
    ASSERT_EQ(d.state, ChunkedDecoder::State::done) << piece << ": " << d.refusal.message;
    EXPECT_EQ(d.body, "hello" + std::string(26, 'z'));
    // It stops at the end of the body: what follows is the next request's.
    EXPECT_EQ(bytes.substr(d.used), "GET /next HTTP/1.1\r\n") << piece;
  }
}

TEST(HttpFraming, ChunkSizesAreHexDigitsOnly) {
  expect_chunks_refused("0x2e\r\n", 400, "has bytes after its size");
  expect_chunks_refused("+2e\r\n", 400, "does not start with hex digits");
  expect_chunks_refused(" 2e\r\n", 400, "does not start with hex digits");
  expect_chunks_refused("2e garbage\r\n", 400, "has bytes after its size");
  expect_chunks_refused("\r\n", 400, "does not start with hex digits");
  expect_chunks_refused("5\nhello\r\n0\r\n\r\n", 400, "bare LF");
  EXPECT_EQ(decode("2e ; ext\r\n", 100).state, ChunkedDecoder::State::more);  // whitespace before ';' is allowed
}

TEST(HttpFraming, ChunkDataMustEndInCrlf) {
  expect_chunks_refused("5\r\nhelloGET / HTTP/1.1\r\n", 400, "not followed by CRLF");
  expect_chunks_refused("5\r\nhello\rX", 400, "not followed by CRLF");
}

TEST(HttpFraming, EveryPartOfAChunkedBodyIsBounded) {
  // A size line that never ends is refused at 1 KiB, not kept.
  expect_chunks_refused(std::string(100000, '1'), 400, "chunk-size line is over 1024 bytes");
  expect_chunks_refused("1;" + std::string(2000, 'e') + "\r\n", 400, "over 1024 bytes");
  expect_chunks_refused("0000000000000001\r\n", 413, "more than 15 hex digits");
  FramingLimits small;
  small.max_body_bytes = 10;
  Decoded d = decode("6\r\nabcdef\r\n5\r\nghijk\r\n0\r\n\r\n", 1, small);
  EXPECT_EQ(d.state, ChunkedDecoder::State::refused);
  EXPECT_EQ(d.refusal.status, 413);
  EXPECT_EQ(d.body, "abcdef");
  d = decode("6\r\nabcdef\r\n4\r\nghij\r\n0\r\n\r\n", 1, small);
  EXPECT_EQ(d.state, ChunkedDecoder::State::done);
  std::string trailers = "0\r\n";
  while (trailers.size() < 10000) trailers += "X-T: " + std::string(90, 't') + "\r\n";
  expect_chunks_refused(trailers + "\r\n", 431, "trailers are over 8192 bytes");
}

}  // namespace
}  // namespace minfer::test
