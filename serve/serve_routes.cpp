#include "serve/serve_routes.h"

#if MINFER_HAVE_HTTPLIB

namespace minfer::serve {

using httplib::Request;
using httplib::Response;

namespace {

// The headers a preflight may allow: those it asks for (the OpenAI SDKs add their own x-stainless-*
// headers), when they are a list of header names; else Authorization and Content-Type.
std::string cors_request_headers(const std::string& asked) {
  const bool names = !asked.empty() && asked.size() <= 1024 &&
                     asked.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_, ") ==
                         std::string::npos;
  return names ? asked : "Authorization, Content-Type";
}

const Route kRoutes[] = {{"/v1/completions", "POST"},
                         {"/v1/chat/completions", "POST"},
                         {"/v1/models", "GET"},
                         {"/health", "GET"},
                         {"/metrics", "GET"},
                         {"/tokenize", "POST"},
                         {"/detokenize", "POST"}};

}  // namespace

void send_json(Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

void send_error(Response& res, const ApiError& error) { send_json(res, error.status, error_body(error)); }

void set_cors_headers(Response& res, const std::string& origin) {
  res.set_header("Access-Control-Allow-Origin", origin);
  res.set_header("Vary", "Origin");
}

const Route* find_route(const std::string& path) {
  for (const auto& r : kRoutes)
    if (path == r.path) return &r;
  return nullptr;
}

bool refuse(Response& res, const ApiError& error) {
  ConnectionServer::close_after_response(res);
  send_error(res, error);
  return true;
}

std::optional<Refusal> refused_head(const AccessOptions& access, const RequestHead& head) {
  const bool needs_key = head.method != "OPTIONS" && head.target.substr(0, head.target.find('?')) != "/health";
  const auto refusal = check_access(access, head.host, head.origin, head.authorization, needs_key);
  if (!refusal) return std::nullopt;
  std::string headers = refusal->status == 401 ? "WWW-Authenticate: Bearer\r\n" : "";
  if (cors_allowed(access, head.origin)) headers += "Access-Control-Allow-Origin: " + head.origin + "\r\nVary: Origin\r\n";
  return Refusal{refusal->status, refusal->message, refusal->code, headers};
}

bool answer_preflight(const AccessOptions& access, const Request& req, Response& res, const Route* route) {
  if (req.method != "OPTIONS" || route == nullptr) return false;
  const std::string methods = std::string(route->method) + ", OPTIONS";
  res.status = 204;
  res.set_header("Allow", methods);
  if (cors_allowed(access, req.get_header_value("Origin"))) {
    res.set_header("Access-Control-Allow-Methods", methods);
    res.set_header("Access-Control-Allow-Headers", cors_request_headers(req.get_header_value("Access-Control-Request-Headers")));
    res.set_header("Access-Control-Max-Age", "600");
  }
  return true;
}

bool refuse_route(const Request& req, Response& res, const Route* route) {
  if (route == nullptr)
    return refuse(res, {404,
                        "no route " + one_line(req.method, 16) + " " + one_line(req.path, 200) +
                            " (the routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, /health, "
                            "/metrics, POST /tokenize, POST /detokenize)",
                        "", "not_found"});
  if (req.method == route->method || (req.method == "HEAD" && std::string(route->method) == "GET")) return false;
  res.set_header("Allow", route->method);
  return refuse(res, {405, one_line(req.method, 16) + " " + route->path + ": only " + route->method, "",
                      "method_not_allowed"});
}

bool refuse_content_type(const Request& req, Response& res) {
  if (!req.is_multipart_form_data()) return false;
  return refuse(res, {415, "the body must be JSON (Content-Type: application/json), not a multipart form", "",
                      "unsupported_media_type"});
}

void answer_body(Response& res, const httplib::ContentReader& read,
                 const std::function<std::string(const std::string&)>& answer) {
  std::string body;
  read([&](const char* data, size_t n) {
    body.append(data, n);
    return true;
  });
  try {
    send_json(res, 200, answer(body));
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

}  // namespace minfer::serve

#endif  // MINFER_HAVE_HTTPLIB
