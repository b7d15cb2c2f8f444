// Who may use `minfer serve`: an API key, and the Host and Origin headers a request may carry.
//
// A server on 127.0.0.1 is reachable by every program on the machine, and by every web page its
// user opens: a page can POST to http://127.0.0.1:8080 (a text/plain body needs no CORS preflight,
// so the request runs even though the page cannot read the answer), and a page on a name that the
// attacker's DNS later points at 127.0.0.1 (DNS rebinding) can read answers too. Three checks, as
// llama-server and vLLM make the first:
//   - the key (--api-key, or --api-key-file with one key a line): every route but /health (and
//     a CORS preflight, OPTIONS) wants `Authorization: Bearer KEY` with one of the keys, else 401;
//   - Host: on a loopback address only loopback names (localhost, 127.0.0.1, [::1]) are served,
//     else 403 (a rebound name arrives with the attacker's Host); --allowed-hosts replaces those
//     names with its own, and `*` takes any. On another address any Host is served unless
//     --allowed-hosts says otherwise;
//   - Origin: a browser names the page's origin; a request that carries one is served only when
//     --allowed-origins lists it (or is `*`), else 403, and an allowed origin gets CORS headers
//     and answers to its preflight (OPTIONS) requests.
// The connection runs check_access on a request's head (serve/http_server.h's head check), before
// it sends "100 Continue" or reads a body: a refused client cannot make the server hold its body
// (bytes that came with the head are dropped), and its connection closes after the 401 or 403.
// An empty Host (RFC 9112 allows one) is not checked against the allowed names.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "serve/serve_api.h"

namespace minfer::serve {

struct AccessOptions {
  std::vector<std::string> api_keys;          // none: no key; else any one of them opens
  std::vector<std::string> allowed_hosts;     // lowercase names without ports; "*" any
  std::vector<std::string> allowed_origins;   // "scheme://host[:port]"; "*" any
};

// The options for a server listening on `listen_host`: `hosts` and `origins` are the options'
// comma-separated lists (empty: the defaults above).
AccessOptions make_access_options(const std::string& listen_host, std::vector<std::string> api_keys,
                                  const std::string& hosts, const std::string& origins);
// The keys in a key file: one a line, without surrounding blanks; blank lines and lines starting
// with '#' are skipped. Throws Error naming the file when it cannot be read or holds no key.
std::vector<std::string> read_api_key_file(const std::string& path);

// The refusal of a request with these headers ("" where absent), or none. `needs_key`: the route
// is not /health.
std::optional<ApiError> check_access(const AccessOptions& access, const std::string& host, const std::string& origin,
                                     const std::string& authorization, bool needs_key);
// Whether a request from `origin` gets CORS headers (it carries one and it is allowed).
bool cors_allowed(const AccessOptions& access, const std::string& origin);

}  // namespace minfer::serve
