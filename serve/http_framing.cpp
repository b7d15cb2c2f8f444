#include "serve/http_framing.h"

#include <algorithm>
#include <vector>

#include "serve/serve_api.h"

namespace minfer::serve {

namespace {

constexpr size_t kShown = 64;  // bytes of a client's value an error message shows, at most

bool is_tchar(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  if ((u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// A field value's bytes (RFC 9110, 5.5): visible ASCII, obs-text, space and tab; no other control.
bool is_field_byte(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  return u == '\t' || u == ' ' || (u >= 0x21 && u != 0x7f);
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

int hex_value(char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A client's bytes in a message: cut, on one line.
std::string shown(std::string_view s) { return one_line(std::string(s.substr(0, kShown + 1)), kShown); }

// The comma-separated elements of a list-valued field (RFC 9110, 5.6.1), empty ones dropped.
std::vector<std::string_view> list_elements(std::string_view value) {
  std::vector<std::string_view> out;
  for (size_t start = 0; start <= value.size();) {
    size_t comma = value.find(',', start);
    if (comma == std::string_view::npos) comma = value.size();
    const std::string_view element = trim_ows(value.substr(start, comma - start));
    if (!element.empty()) out.push_back(element);
    start = comma + 1;
  }
  return out;
}

// A reg-name's characters (RFC 3986, 3.2.2: unreserved and sub-delims) but for '%': no client
// names a host in percent-encoding. An IPv4 address is a reg-name too.
bool is_name_char(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  return (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') ||
         std::string_view("-._~!$&'()*+,;=").find(c) != std::string_view::npos;
}

// Host's value (RFC 9110, 7.2: uri-host [":" port]): a reg-name, or an IPv6 literal in brackets
// (hex digits, ':' and '.'), then nothing, or ':' and a port of at most 5 digits up to 65535
// (empty too: RFC 3986's port is *DIGIT). Empty is allowed (RFC 9112, 3.2); a port without a name
// is not, nor anything after the name or the literal's ']' but the port.
bool valid_host(std::string_view host) {
  if (host.empty()) return true;
  size_t name_end = 0;
  if (host.front() == '[') {
    name_end = host.find(']');
    if (name_end == std::string_view::npos) return false;
    const std::string_view literal = host.substr(1, name_end - 1);
    if (literal.find(':') == std::string_view::npos) return false;
    for (char c : literal)
      if (!is_hex(c) && c != ':' && c != '.') return false;
    ++name_end;
  } else {
    while (name_end < host.size() && is_name_char(host[name_end])) ++name_end;
    if (name_end == 0) return false;
  }
  if (name_end == host.size()) return true;
  const std::string_view port = host.substr(name_end + 1);
  if (host[name_end] != ':' || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos)
    return false;
  return port.empty() || std::stoul(std::string(port)) <= 65535;
}

// A header value as httplib is to read it: httplib 0.11 percent-decodes header values, so '%'
// goes as "%25" and comes out as '%'.
void append_escaped(std::string& out, std::string_view value) {
  for (char c : value) {
    if (c == '%') out += "%25";
    else out += c;
  }
}

struct Parse {
  Parse(const FramingLimits& l, RequestHead& o, Refusal& r) : limits(l), out(o), refusal(r) {}
  const FramingLimits& limits;
  RequestHead& out;
  Refusal& refusal;

  bool refuse(int status, std::string message, std::string headers = "") {
    refusal = {status, std::move(message), "", std::move(headers)};
    return false;
  }

  // The fields that frame the request or that the front door answers itself, gathered while the
  // rest are copied into the canonical head.
  bool host_from_target = false;  // out.host is the absolute-form target's authority
  int hosts = 0;               // Host fields
  int authorizations = 0;      // Authorization fields
  std::string content_length;
  int content_lengths = 0;
  std::vector<std::string_view> transfer_codings;
  bool close_asked = false, keep_alive_asked = false;

  bool request_line(std::string_view line) {
    if (line.size() + 2 > limits.max_line_bytes)
      return refuse(414, "the request line is over " + std::to_string(limits.max_line_bytes) + " bytes");
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
      return refuse(400, "the request line is not 'METHOD target HTTP/1.1'");
    const std::string_view method = line.substr(0, sp1), raw_target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    const std::string_view version = line.substr(sp2 + 1);
    if (method.empty()) return refuse(400, "the request line has no method");
    for (char c : method)
      if (!is_tchar(c)) return refuse(400, "the method '" + shown(method) + "' is not a token");
    if (version != "HTTP/1.1" && version != "HTTP/1.0") {
      if (version.size() == 8 && version.substr(0, 5) == "HTTP/" && version[6] == '.')
        return refuse(505, "HTTP version '" + shown(version) + "' is not supported (HTTP/1.1 and HTTP/1.0)");
      return refuse(400, "the request line is not 'METHOD target HTTP/1.1'");
    }
    out.method = std::string(method);
    out.version = std::string(version);
    return request_target(raw_target);
  }

  // origin-form, absolute-form (http or https; its authority replaces Host) or OPTIONS' "*".
  bool request_target(std::string_view t) {
    if (t.empty()) return refuse(400, "the request line has no target");
    for (char c : t) {
      const unsigned char u = static_cast<unsigned char>(c);
      if (u <= 0x20 || u >= 0x7f) return refuse(400, "the request target has a byte that is not visible ASCII");
    }
    if (t.front() == '/' || (t == "*" && out.method == "OPTIONS")) {
      out.target = std::string(t);
      return true;
    }
    const size_t scheme_end = t.find("://");
    const std::string_view scheme = scheme_end == std::string_view::npos ? t : t.substr(0, scheme_end);
    if (scheme_end == std::string_view::npos || !(iequals(scheme, "http") || iequals(scheme, "https")))
      return refuse(400, "the request target '" + shown(t) + "' is neither a path nor an http URL");
    const std::string_view rest = t.substr(scheme_end + 3);
    const size_t path = rest.find_first_of("/?");
    const std::string_view authority = rest.substr(0, path);
    if (authority.empty() || authority.find('@') != std::string_view::npos || !valid_host(authority))
      return refuse(400, "the request target's authority '" + shown(authority) + "' is not a host");
    out.target = path == std::string_view::npos ? "/" : (rest[path] == '?' ? "/" : "") + std::string(rest.substr(path));
    out.host = std::string(authority);  // in place of the Host field's (RFC 9112, 3.2.2)
    host_from_target = true;
    return true;
  }

  bool field_line(std::string_view line) {
    if (line.front() == ' ' || line.front() == '\t')
      return refuse(400, "a header line starts with whitespace (obsolete line folding is not accepted)");
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return refuse(400, "a header line has no ':'");
    const std::string_view name = line.substr(0, colon);
    if (name.empty()) return refuse(400, "a header line has no name");
    for (char c : name)
      if (!is_tchar(c))
        return refuse(400, c == ' ' || c == '\t' ? "whitespace between a header's name and its ':' is not accepted"
                                                 : "the header name '" + shown(name) + "' is not a token");
    const std::string_view value = trim_ows(line.substr(colon + 1));
    for (char c : value)
      if (!is_field_byte(c))
        return refuse(400, "the header " + shown(name) + " has a control byte in its value");
    return field(name, value);
  }

  bool field(std::string_view name, std::string_view value) {
    if (iequals(name, "Host")) {
      if (!valid_host(value)) return refuse(400, "Host: '" + shown(value) + "' is not a host");
      if (value.size() + 8 > limits.max_line_bytes) return line_too_long(name);
      if (++hosts == 1 && !host_from_target) out.host = std::string(value);
    } else if (iequals(name, "Content-Encoding")) {
      // (A body is read as sent: no coding is undone here or by httplib; RFC 9110, 15.5.16.)
      for (std::string_view coding : list_elements(value))
        if (!iequals(coding, "identity"))
          return refuse(415, "Content-Encoding: '" + shown(coding) + "' is not supported (bodies are read as sent: "
                             "only identity)", "Accept-Encoding: identity\r\n");
    } else if (iequals(name, "Content-Length")) {
      if (value.empty() || value.find_first_not_of("0123456789") != std::string_view::npos)
        return refuse(400, "Content-Length: '" + shown(value) + "' is not a number of bytes");
      if (content_lengths++ > 0 && value != content_length)
        return refuse(400, "two different Content-Length headers");
      content_length = std::string(value);
    } else if (iequals(name, "Transfer-Encoding")) {
      for (std::string_view coding : list_elements(value)) transfer_codings.push_back(coding);
      if (value.empty() || transfer_codings.empty()) return refuse(400, "an empty Transfer-Encoding header");
    } else if (iequals(name, "Connection")) {
      for (std::string_view option : list_elements(value)) {
        close_asked = close_asked || iequals(option, "close");
        keep_alive_asked = keep_alive_asked || iequals(option, "keep-alive");
      }
    } else if (iequals(name, "Expect")) {
      if (!iequals(value, "100-continue"))
        return refuse(417, "Expect: '" + shown(value) + "' is not supported (only 100-continue)");
      out.expects_continue = out.version == "HTTP/1.1";
    } else if (!iequals(name, "Range") && !iequals(name, "If-Range") && !iequals(name, "Keep-Alive")) {
      if (iequals(name, "Authorization") && ++authorizations > 1) return refuse(400, "more than one Authorization header");
      if (iequals(name, "Authorization")) out.authorization = std::string(value);
      if (iequals(name, "Origin") && out.origin.empty()) out.origin = std::string(value);
      // (Range and If-Range: no answer of this server is served in ranges; RFC 9110, 14.2 lets a
      // server ignore them.)
      std::string line(name);
      line += ": ";
      append_escaped(line, value);
      line += "\r\n";
      if (line.size() > limits.max_line_bytes) return line_too_long(name);
      out.canonical += line;
    }
    return true;
  }

  // A header line that httplib is to read is over its limit (as httplib is handed it). The
  // headers the front door reads itself and drops (Range, framing) are bounded by the head's size.
  bool line_too_long(std::string_view name) {
    return refuse(431, "the header " + shown(name) + " is over " + std::to_string(limits.max_line_bytes) +
                           " bytes (the limit of one header line)");
  }

  // How the body is framed (RFC 9112, 6.1-6.3), and who may send one.
  bool framing() {
    const bool http11 = out.version == "HTTP/1.1";
    if (!transfer_codings.empty()) {
      if (!http11) return refuse(400, "Transfer-Encoding in an HTTP/1.0 request");
      if (content_lengths > 0) return refuse(400, "both Transfer-Encoding and Content-Length: the body's end is ambiguous");
      if (transfer_codings.size() != 1 || !iequals(transfer_codings[0], "chunked"))
        return refuse(501, "Transfer-Encoding: '" + shown(transfer_codings.back()) +
                               "' is not supported (only chunked, alone)");
      out.body = RequestHead::Body::chunked;
    } else if (content_lengths > 0) {
      // (More than 19 digits, leading zeros aside, is past uint64_t, and over any limit.)
      const size_t first_digit = std::min(content_length.find_first_not_of('0'), content_length.size() - 1);
      const std::string digits = content_length.substr(first_digit);
      if (digits.size() > 19 || std::stoull(digits) > limits.max_body_bytes)
        return refuse(413, "the request body of " + shown(content_length) + " bytes is over the limit of " +
                               std::to_string(limits.max_body_bytes) + " bytes (--max-body-bytes)");
      out.content_length = std::stoull(digits);
      out.body = out.content_length > 0 ? RequestHead::Body::length : RequestHead::Body::none;
    }
    if (out.body != RequestHead::Body::none && out.method != "POST")
      return refuse(400, shown(out.method) + " requests carry no body here (only POST does)");
    if (http11 && hosts == 0) return refuse(400, "an HTTP/1.1 request without a Host header");
    if (hosts > 1) return refuse(400, "more than one Host header");
    out.expects_continue = out.expects_continue && out.body != RequestHead::Body::none;
    out.close = close_asked || (!http11 && !keep_alive_asked);
    return true;
  }

  void finish() {
    std::string head = out.method + " " + out.target + " " + out.version + "\r\n";
    if (hosts > 0 || host_from_target) head += "Host: " + out.host + "\r\n";
    if (out.close) head += "Connection: close\r\n";
    else if (out.version == "HTTP/1.0") head += "Connection: Keep-Alive\r\n";
    out.canonical = head + out.canonical;
  }
};

}  // namespace

const char* reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status >= 500 ? "Server Error" : "Bad Request";
  }
}

bool parse_request_head(std::string_view head, const FramingLimits& limits, RequestHead& out, Refusal& refusal) {
  out = RequestHead{};
  refusal = Refusal{};
  Parse parse(limits, out, refusal);
  bool first = true;
  for (size_t start = 0; start < head.size();) {
    const size_t lf = head.find('\n', start);
    if (lf == std::string_view::npos) return parse.refuse(400, "the head does not end in a blank line");
    if (lf == start || head[lf - 1] != '\r') return parse.refuse(400, "a line ends in a bare LF (not CRLF)");
    const std::string_view line = head.substr(start, lf - 1 - start);
    start = lf + 1;
    if (line.find('\r') != std::string_view::npos) return parse.refuse(400, "a bare CR inside a line");
    if (line.empty()) {
      if (first) return parse.refuse(400, "the request has no request line");
      if (start != head.size()) return parse.refuse(400, "bytes after the blank line that ends the head");
      if (!parse.framing()) return false;
      parse.finish();
      return true;
    }
    if (first ? !parse.request_line(line) : !parse.field_line(line)) return false;
    first = false;
  }
  return parse.refuse(400, "the head does not end in a blank line");
}

std::string canonical_request(const RequestHead& head, std::string_view body) {
  std::string request = head.canonical;
  request += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  request += body;
  return request;
}

ChunkedDecoder::State ChunkedDecoder::refuse(int status, std::string message) {
  refusal_ = {status, std::move(message), "", ""};
  return State::refused;
}

// "1a;name=value" (RFC 9112, 7.1.1): hex digits, then nothing or extensions after optional
// whitespace and ';' (read for their bytes only, and dropped).
ChunkedDecoder::State ChunkedDecoder::end_size_line(std::string& body) {
  size_t digits = 0;
  uint64_t size = 0;
  for (; digits < line_.size() && is_hex(line_[digits]); ++digits) {
    if (digits == 15) return refuse(413, "a chunk size of more than 15 hex digits");
    size = size * 16 + static_cast<uint64_t>(hex_value(line_[digits]));
  }
  if (digits == 0) return refuse(400, "the chunk-size line '" + shown(line_) + "' does not start with hex digits");
  size_t rest = digits;
  while (rest < line_.size() && (line_[rest] == ' ' || line_[rest] == '\t')) ++rest;
  if (rest < line_.size() && line_[rest] != ';')
    return refuse(400, "the chunk-size line '" + shown(line_) + "' has bytes after its size that are not an extension");
  for (size_t i = rest; i < line_.size(); ++i)
    if (!is_field_byte(line_[i])) return refuse(400, "a chunk extension has a control byte");
  if (size > limits_.max_body_bytes - body.size())
    return refuse(413, "the request body is over the limit of " + std::to_string(limits_.max_body_bytes) +
                           " bytes (--max-body-bytes)");
  line_.clear();
  left_ = size;
  part_ = size == 0 ? Part::trailers : Part::data;
  return State::more;
}

// A trailer line: kept only to find the blank line that ends the body; trailers are dropped.
ChunkedDecoder::State ChunkedDecoder::end_trailer_line() {
  const bool blank = line_.empty();
  line_.clear();
  return blank ? State::done : State::more;
}

ChunkedDecoder::State ChunkedDecoder::feed(const char* data, size_t size, size_t& used, std::string& body) {
  used = 0;
  while (used < size) {
    const char c = data[used];
    switch (part_) {
      case Part::data: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(left_, size - used));
        body.append(data + used, n);
        used += n;
        left_ -= n;
        if (left_ == 0) part_ = Part::data_end;
        continue;
      }
      case Part::data_end:
        ++used;
        if (c != (data_end_seen_ == 0 ? '\r' : '\n')) return refuse(400, "chunk data is not followed by CRLF");
        if (++data_end_seen_ == 2) {
          data_end_seen_ = 0;
          part_ = Part::size_line;
        }
        continue;
      case Part::size_line:
      case Part::trailers: {
        ++used;
        const bool trailer = part_ == Part::trailers;
        if (trailer && ++trailer_bytes_ > limits_.max_line_bytes)
          return refuse(431, "the chunked body's trailers are over " + std::to_string(limits_.max_line_bytes) + " bytes");
        if (c != '\n') {
          if (!trailer && line_.size() >= kMaxSizeLine)
            return refuse(400, "a chunk-size line is over " + std::to_string(kMaxSizeLine) + " bytes");
          line_ += c;
          continue;
        }
        if (line_.empty() || line_.back() != '\r') return refuse(400, "a line of the chunked body ends in a bare LF");
        line_.pop_back();
        if (line_.find('\r') != std::string::npos) return refuse(400, "a bare CR in a line of the chunked body");
        const State s = trailer ? end_trailer_line() : end_size_line(body);
        if (s != State::more) return s;
        continue;
      }
    }
  }
  return State::more;
}

}  // namespace minfer::serve
