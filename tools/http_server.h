// cpp-httplib's Server with the three things `minfer serve` needs from the connections themselves,
// which httplib 0.11 (Debian 12's) does not give a handler:
//   - a limit on open connections: one more is answered 503 at once and closed, instead of
//     waiting in a queue behind streams that can last minutes (ConnectionServer's task queue runs
//     each connection on its own thread, up to the limit);
//   - the socket of the request a thread is handling (current_socket), so that a handler waiting
//     for tokens can notice that its client has gone (peer_closed) and cancel the request;
//   - answers that end their connection (close_after_response): a refusal sent before the body
//     was read (404, 405, 413) must not leave the unread body to be parsed as the next request,
//     and the connection is closed lingering, so that the client reads the answer instead of a
//     reset.
// It does so by overriding Server::process_and_close_socket (the hook httplib's own SSLServer
// overrides) with the same keep-alive loop over its own socket stream.
#pragma once

#if MINFER_HAVE_HTTPLIB

#include <httplib.h>

#include <atomic>
#include <cstddef>
#include <string>

namespace minfer::cli {

class SocketStream;  // a connection's socket as httplib's Stream (in http_server.cpp)

class ConnectionServer : public httplib::Server {
 public:
  // `refusal_body` is the JSON answered with 503 to a connection over `max_connections`.
  ConnectionServer(size_t max_connections, std::string refusal_body);

  // Binds host:port (port 0: a free one) with a listening backlog of 128; returns the port, or
  // throws Error.
  int bind(const std::string& host, int port);
  // From now on every connection ends after its current request, and idle kept-alive
  // connections close (shutdown); new connections still get one answer each.
  void close_kept_alive();

  // The socket of the connection whose request this thread is handling; -1 outside a handler.
  static int current_socket();
  // Whether the peer of `socket` has closed its side or the connection failed.
  static bool peer_closed(int socket);
  // The answer this thread is writing ends its connection (and says so: Connection: close).
  static void close_after_response(httplib::Response& res);

 private:
  bool process_and_close_socket(int sock) override;
  bool wait_for_request(const SocketStream& stream, bool first) const;
  void refuse(int sock) const;

  size_t max_connections_;
  std::string refusal_body_;
  std::atomic<bool> closing_{false};
};

}  // namespace minfer::cli

#endif  // MINFER_HAVE_HTTPLIB
