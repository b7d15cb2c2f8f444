// The front door of `minfer serve`: a request's head and body read as strictly as RFC 9112 asks
// of a server, before cpp-httplib sees any of it.
//
// Why: httplib 0.11 (Debian 12's) parses leniently. It skips header lines it cannot read, decodes
// %XX in header values, frames a request with both Transfer-Encoding and Content-Length by the
// length, takes "0x2e" or " 2e" as chunk sizes, keeps a chunk-size line in memory however long it
// grows, reads no body for a GET (so the body runs as the next request), and applies a Range
// header to every answer. Behind a proxy that reuses connections, any disagreement about where a
// request ends lets one client's bytes be answered as another's request ("request smuggling").
//
// So the connection (serve/http_server.cpp) reads the head and the whole body itself, refuses
// anything ambiguous with a 4xx and closes, and hands httplib a canonical request instead of the
// client's bytes:
//   - the request line in origin form (an absolute-form target's authority becomes the Host);
//   - the client's header lines, each checked, with every '%' written as "%25" (so that httplib's
//     decoding gives back the bytes the client sent);
//   - Host once, "Connection: close" when the connection ends after this request ("Keep-Alive"
//     for an HTTP/1.0 client that asked for it), no Range, If-Range, Expect, Transfer-Encoding or
//     Content-Encoding;
//   - "Content-Length: N" and the body, de-chunked, that the front door read.
// httplib then parses a request with one meaning, and an answer never reads past its request.
//
// What else the head alone decides:
//   - Host (or an absolute-form target's authority) is read strictly: empty (RFC 9112, 3.2), or a
//     name or IPv4 address, or an IPv6 literal in brackets, then nothing or ':' and a port of at
//     most 5 digits up to 65535 (empty too, as RFC 3986 allows: "localhost:" is "localhost");
//     anything else is 400.
//   - Authorization may come once (two are 400: which one is the key?).
//   - A body is taken as sent: a Content-Encoding other than identity is 415 (httplib, built with
//     zlib and brotli, would unpack a gzip body without bound: 1 MB into 1 GB). Answers are not
//     compressed either (serve/http_server.cpp).
//   - The head's Host, Origin, Authorization, method and target are kept (RequestHead), so that
//     the connection can check who asks before it reads a body (ConnectionServer's head check).
//
// Nothing here touches a socket: the fuzzer (tests/fuzz/fuzz_http_head.cpp) and the unit tests
// drive these functions with bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace minfer::serve {

struct FramingLimits {
  // The request line or one header line, its CRLF included, as httplib is handed it: 8192 bytes is
  // httplib 0.11's own cap on a header line (CPPHTTPLIB_HEADER_MAX_LENGTH, compiled into its
  // library). Over it: 414 for the request line, 431 for a header line.
  size_t max_line_bytes = 8192;
  uint64_t max_body_bytes = 1 << 20;  // over it: 413
};

// Why a request is refused: an HTTP status (4xx or 5xx) and a one-line message. status 0: none.
struct Refusal {
  int status = 0;
  std::string message;
  std::string code;     // the error object's machine-readable code; "" for the status's own
  std::string headers;  // header lines the answer adds, each ending in CRLF (WWW-Authenticate, ...)
};

// The reason phrase of the statuses the front door answers.
const char* reason_phrase(int status);

// A head that passed.
struct RequestHead {
  enum class Body { none, length, chunked };
  std::string method;
  std::string version;          // "HTTP/1.0" or "HTTP/1.1"
  Body body = Body::none;
  uint64_t content_length = 0;  // for Body::length
  bool close = false;           // the connection ends after this request's answer
  bool expects_continue = false;  // an HTTP/1.1 client waits for "100 Continue" before its body
  std::string target;         // in origin form ("/v1/models?x=1"), or "*"
  std::string host;           // the Host field's value or the absolute-form target's authority ("" when none)
  std::string origin;         // the first Origin field's value ("" when none)
  std::string authorization;  // the Authorization field's value ("" when none)
  // The request line and header lines to hand httplib, each ending in CRLF, without the blank line
  // (and without Content-Length, which canonical_request adds).
  std::string canonical;
};

// Parses a request's head: the request line and header lines, each ending in CRLF, up to and
// including the blank line that ends them (a head may also end at a bare LF, to be refused).
// True with `out` filled; false with `refusal` set (the connection is then closed).
bool parse_request_head(std::string_view head, const FramingLimits& limits, RequestHead& out, Refusal& refusal);

// What httplib is handed for a request: the canonical head, its body's length, and the body.
std::string canonical_request(const RequestHead& head, std::string_view body);

// A chunked body (RFC 9112, 7.1), decoded as its bytes arrive. Every line it keeps is bounded (a
// chunk-size line with its extensions: 1024 bytes; trailers: FramingLimits::max_line_bytes in
// all), and so is the body. Sizes are hex digits only, then optional extensions after ';'; chunk
// data must be followed by CRLF.
class ChunkedDecoder {
 public:
  explicit ChunkedDecoder(const FramingLimits& limits) : limits_(limits) {}
  enum class State { more, done, refused };
  // Decodes from `data` (size bytes), appending chunk data to `body`; sets `used` to the bytes it
  // took, which are all of them unless it returns done (the rest is the next request) or refused.
  State feed(const char* data, size_t size, size_t& used, std::string& body);
  const Refusal& refusal() const { return refusal_; }

  static constexpr size_t kMaxSizeLine = 1024;

 private:
  enum class Part { size_line, data, data_end, trailers };
  State refuse(int status, std::string message);
  State end_size_line(std::string& body);
  State end_trailer_line();

  FramingLimits limits_;
  Part part_ = Part::size_line;
  std::string line_;           // the line being read (size line or trailer), without its LF
  uint64_t left_ = 0;          // bytes of the current chunk still to come
  size_t data_end_seen_ = 0;   // of the CRLF after chunk data
  size_t trailer_bytes_ = 0;
  Refusal refusal_;
};

}  // namespace minfer::serve
