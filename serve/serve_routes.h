// The routes of `minfer serve` and the checks every request passes before its handler: the route
// and method, the key, Host and Origin on the head (serve/serve_access.h), CORS preflights, the
// content type, and the JSON answers and refusals the handlers send.
#pragma once

#if MINFER_HAVE_HTTPLIB

#include <functional>
#include <optional>
#include <string>

#include "serve/http_server.h"
#include "serve/serve_access.h"
#include "serve/serve_api.h"

namespace minfer::serve {

void send_json(httplib::Response& res, int status, const std::string& body);
void send_error(httplib::Response& res, const ApiError& error);  // the error's status and JSON
// An allowed browser origin may read the answer (and the error) it gets.
void set_cors_headers(httplib::Response& res, const std::string& origin);

struct Route {
  const char* path;
  const char* method;
};
const Route* find_route(const std::string& path);  // null for a path that is no route

// Each of the checks below answers (true) or lets the request through (false). Their answers end
// the connection: httplib has not read the body the front door holds for it (and a connection
// whose request httplib did not read whole closes anyway: ConnectionServer).
bool refuse(httplib::Response& res, const ApiError& error);
// The key, Host and Origin, checked by the connection on a request's head before its body is read:
// a preflight carries no key; every route but /health (and any unknown one) wants it. An allowed
// origin may read the refusal too.
std::optional<Refusal> refused_head(const AccessOptions& access, const RequestHead& head);
// OPTIONS on a route: the methods it takes, and for an allowed origin what its requests may carry.
bool answer_preflight(const AccessOptions& access, const httplib::Request& req, httplib::Response& res,
                      const Route* route);
// 404 for no route, 405 for a method the route does not take.
bool refuse_route(const httplib::Request& req, httplib::Response& res, const Route* route);
// The routes that take a body read it as JSON: a multipart form is refused before httplib's form
// parser would read it.
bool refuse_content_type(const httplib::Request& req, httplib::Response& res);

// A route whose answer is made from its whole body at once: the answer's JSON, or the refusal.
void answer_body(httplib::Response& res, const httplib::ContentReader& read,
                 const std::function<std::string(const std::string&)>& answer);

}  // namespace minfer::serve

#endif  // MINFER_HAVE_HTTPLIB
