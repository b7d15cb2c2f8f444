#include "serve/serve_access.h"

#include <algorithm>
#include <cctype>
#include <fstream>

#include "core/error.h"

namespace minfer::serve {

namespace {

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trimmed(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = trimmed(list.substr(start, comma - start));
    if (!item.empty()) items.push_back(item);
    start = comma + 1;
  }
  return items;
}

// "Localhost:8080" -> "localhost", "[::1]:8080" -> "[::1]".
std::string host_name(const std::string& host_header) {
  std::string host = lowercase(trimmed(host_header));
  if (!host.empty() && host.front() == '[') return host.substr(0, host.find(']') + 1);
  return host.substr(0, host.find(':'));
}

bool loopback(const std::string& address) {
  return address == "localhost" || address == "::1" || address.rfind("127.", 0) == 0;
}

bool listed(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), "*") != list.end() || std::find(list.begin(), list.end(), item) != list.end();
}

// Compares every byte whatever the first difference, so that the time taken does not say how
// much of a guess was right.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % std::max<size_t>(1, b.size())]);
  return diff == 0;
}

}  // namespace

AccessOptions make_access_options(const std::string& listen_host, std::vector<std::string> api_keys,
                                  const std::string& hosts, const std::string& origins) {
  AccessOptions access;
  access.api_keys = std::move(api_keys);
  for (const std::string& h : split_list(hosts)) access.allowed_hosts.push_back(host_name(h));
  if (hosts.empty()) {
    if (loopback(listen_host)) access.allowed_hosts = {"localhost", "127.0.0.1", "[::1]"};
    else access.allowed_hosts = {"*"};
  }
  for (const std::string& o : split_list(origins)) access.allowed_origins.push_back(lowercase(o));
  return access;
}

std::vector<std::string> read_api_key_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("--api-key-file: cannot read ", path);
  std::vector<std::string> keys;
  for (std::string line; std::getline(in, line);) {
    const std::string key = trimmed(line);
    if (!key.empty() && key.front() != '#') keys.push_back(key);
  }
  if (keys.empty()) fail("--api-key-file: ", path, " holds no key (one a line; blank lines and '#' lines are skipped)");
  return keys;
}

std::optional<ApiError> check_access(const AccessOptions& access, const std::string& host, const std::string& origin,
                                     const std::string& authorization, bool needs_key) {
  if (!host.empty() && !listed(access.allowed_hosts, host_name(host)))
    return ApiError{403, "Host '" + one_line(host, 100) + "' is not served here (--allowed-hosts)", "", "host_not_allowed"};
  if (!origin.empty() && !listed(access.allowed_origins, lowercase(origin)))
    return ApiError{403, "Origin '" + one_line(origin, 100) + "' is not allowed (--allowed-origins)", "",
                    "origin_not_allowed"};
  if (needs_key && !access.api_keys.empty()) {
    const std::string token(bearer_token(authorization));
    const bool bearer = !token.empty();
    // Every key is compared, whichever matches: the time taken does not say which.
    bool known = false;
    for (const std::string& key : access.api_keys) known = (bearer && same_secret(token, key)) || known;
    if (!known)
      return ApiError{401, bearer ? "the API key is not this server's" : "an API key is required: Authorization: Bearer KEY",
                      "", "invalid_api_key"};
  }
  return std::nullopt;
}

bool cors_allowed(const AccessOptions& access, const std::string& origin) {
  return !origin.empty() && listed(access.allowed_origins, lowercase(origin));
}

}  // namespace minfer::serve
