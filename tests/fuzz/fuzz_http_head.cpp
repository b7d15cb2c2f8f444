// libFuzzer target for the server's front door (serve/http_framing.h): any bytes are a request as
// a client sends them. The head (to the first blank line, as the connection finds it) is parsed;
// one that passes must give a canonical head httplib reads as meant: lines ending in CRLF, none
// longer than the limit, no framing, coding or Range header of the client's, a Host once at most. A
// chunked body then decodes from the rest, fed in pieces whose size the first byte picks; it
// must stay within the body limit and end at the same place however it is cut. Nothing may
// crash, leak or hang.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "serve/http_framing.h"

namespace {

using minfer::serve::ChunkedDecoder;
using minfer::serve::FramingLimits;
using minfer::serve::RequestHead;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

bool starts_with_ci(std::string_view line, std::string_view prefix) {
  if (line.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if ((line[i] | 0x20) != (prefix[i] | 0x20)) return false;
  return true;
}

void check_canonical(const RequestHead& head, const FramingLimits& limits) {
  int hosts = 0;
  for (size_t start = 0; start < head.canonical.size();) {
    const size_t end = head.canonical.find("\r\n", start);
    check(end != std::string::npos);
    const std::string_view line(head.canonical.data() + start, end - start);
    check(line.size() + 2 <= limits.max_line_bytes);
    check(line.find('\n') == std::string_view::npos && line.find('\r') == std::string_view::npos);
    check(!starts_with_ci(line, "Transfer-Encoding:") && !starts_with_ci(line, "Content-Length:") &&
          !starts_with_ci(line, "Range:") && !starts_with_ci(line, "Expect:") &&
          !starts_with_ci(line, "Content-Encoding:"));
    hosts += starts_with_ci(line, "Host:") ? 1 : 0;
    start = end + 2;
  }
  check(hosts <= 1);
}

// Decodes `body` fed `piece` bytes at a time; returns where it stopped (or size + 1 when it wants more).
size_t decode(std::string_view body, size_t piece, const FramingLimits& limits, std::string& out) {
  ChunkedDecoder decoder(limits);
  for (size_t at = 0; at < body.size();) {
    const size_t n = std::min(piece, body.size() - at);
    size_t used = 0;
    const ChunkedDecoder::State state = decoder.feed(body.data() + at, n, used, out);
    check(used <= n);
    check(out.size() <= limits.max_body_bytes);
    at += used;
    if (state == ChunkedDecoder::State::done) return at;
    if (state == ChunkedDecoder::State::refused) return body.size() + 2;
    check(used == n);
  }
  return body.size() + 1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 16;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  FramingLimits limits;
  limits.max_line_bytes = 256;  // small, so that the fuzzer reaches them
  limits.max_body_bytes = 512;
  size_t end = input.find("\r\n\r\n");
  if (end == std::string_view::npos) return 0;
  end += 4;
  RequestHead head;
  minfer::serve::Refusal refusal;
  if (!minfer::serve::parse_request_head(input.substr(0, end), limits, head, refusal)) {
    check(refusal.status >= 400 && refusal.status < 600 && !refusal.message.empty());
    check(refusal.message.size() < 400);
    return 0;
  }
  check_canonical(head, limits);
  check(head.body != RequestHead::Body::none || head.content_length == 0);
  if (head.body != RequestHead::Body::chunked) return 0;
  std::string whole, pieces;
  const size_t stop_whole = decode(input.substr(end), input.size(), limits, whole);
  const size_t stop_pieces = decode(input.substr(end), piece, limits, pieces);
  check(stop_whole == stop_pieces);
  if (stop_whole <= input.size() - end) check(whole == pieces);
  (void)minfer::serve::canonical_request(head, whole);
  return 0;
}
