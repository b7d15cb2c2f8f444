// cpp-httplib's Server with the things `minfer serve` needs from the connections themselves,
// which httplib 0.11 (Debian 12's) does not give a handler:
//   - a limit on open connections (`max_connections`), and a share of them for each client (a
//     peer address: `max_per_client`), which a slowloris (hundreds of sockets, each sending a byte
//     a second) would otherwise take whole. A connection that has not yet sent a whole request
//     head (so it has shown no key either) or that is idle between kept-alive requests is
//     "waiting"; a new connection that finds its client at its share takes the place of that
//     client's oldest waiting one, and one that finds every connection open takes the place of the
//     oldest waiting one of any client. The one evicted is answered 503 and closed (an idle one is
//     closed without an answer). With none to evict, the new connection is answered 503 at once, instead of waiting
//     in a queue behind streams that can last minutes. Each connection runs on a thread of its own
//     (ConnectionServer's task queue, at most twice `max_connections` threads: the spare ones
//     refuse and evict);
//   - the socket of the request a thread is handling (current_socket), so that a handler waiting
//     for tokens can notice that its client has gone (peer_state, probe_with_interim) and cancel
//     the request;
//   - answers that end their connection (close_after_response), closed lingering, so that the
//     client reads the answer instead of a reset;
//   - deadlines and size limits that hold whatever a client does (httplib 0.11 only times out each
//     read, so a client sending a byte a second holds its connection for good): a request's head
//     (request line and headers) must arrive whole within `head_timeout_ms` (from the connection's
//     start for its first request, from the first byte for the next ones; a quarter of it while
//     more than 3/4 of `max_connections` are open) and in at most `max_head_bytes` (else 408 or
//     431, and the connection closes), its body within `body_timeout_ms` after that and in at most
//     `max_body_bytes` (else 408 or 413); abort_connections() ends every connection within 0.1 s,
//     so a shutdown is bounded;
//   - a strict front door (serve/http_framing.h): the connection reads the head and the whole body
//     itself, refuses what RFC 9112 does not allow (a 4xx, and the connection closes), and hands
//     httplib a canonical request, so that httplib's lenient parser never sees a client's bytes;
//   - a check of each head before its body (set_head_check: the key, Host and Origin), so that a
//     refused client is answered before "100 Continue" is sent and before its body is read past
//     what came in the head's last read (what it still sends while the answer lingers is dropped).
// It does so by overriding Server::process_and_close_socket (the hook httplib's own SSLServer
// overrides) with the same keep-alive loop over its own socket stream.
#pragma once

#if MINFER_HAVE_HTTPLIB

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "serve/http_framing.h"

namespace minfer::serve {

class SocketStream;     // a connection's socket as httplib's Stream (in http_server.cpp)
class Closer;           // closes refused connections in the background (in http_server.cpp)
class ConnectionTable;  // the open connections by client, and who is evicted (in http_server.cpp)
struct OpenConnection;  // one of them (in http_server.cpp)

struct ConnectionLimits {
  size_t max_connections = 64;
  size_t max_per_client = 64;  // from one peer address
  int head_timeout_ms = 10000;
  int body_timeout_ms = 30000;
  size_t max_head_bytes = 64 * 1024;
  uint64_t max_body_bytes = 1 << 20;
};

class ConnectionServer : public httplib::Server {
 public:
  // The body of an error answer the server makes itself (503 over the connection limit, 408, 431,
  // the head check's refusals).
  using ErrorBody = std::function<std::string(const Refusal& refusal)>;
  // What is checked on a request's head that passed the front door, before its body is read: a
  // refusal (answered, and the connection closes) or none. Called on the connection's thread.
  using HeadCheck = std::function<std::optional<Refusal>(const RequestHead& head)>;
  ConnectionServer(ConnectionLimits limits, ErrorBody error_body);
  ~ConnectionServer() override;

  // Before listening.
  void set_head_check(HeadCheck check) { head_check_ = std::move(check); }

  // Binds host:port (port 0: a free one) with a listening backlog of 128; returns the port, or
  // throws Error.
  int bind(const std::string& host, int port);
  // From now on every connection ends after its current request, and idle kept-alive
  // connections close (shutdown); new connections still get one answer each.
  void close_kept_alive();
  // Every read fails within 0.1 s (a shutdown after its grace period: a body still arriving will
  // not be used); answers are still written.
  void stop_reading();
  // Every connection ends within 0.1 s, in whatever read or write it is (a shutdown's last step).
  void abort_connections();

  // The socket of the connection whose request this thread is handling; -1 outside a handler.
  static int current_socket();
  // What the peer of `socket` has done: nothing, shut its sending side (which may only mean that
  // its request is complete: RFC 9112, 9.6), or reset the connection (or it failed).
  enum class Peer { open, half_closed, gone };
  static Peer peer_state(int socket);
  // Sends an interim "HTTP/1.1 100 Continue" to a half-closed peer of an HTTP/1.1 request before
  // its answer: a peer that closed for good answers it with a reset (gone at the next look), one
  // that only half-closed reads it and waits on, as HTTP/1.1 clients must. False when it fails.
  static bool probe_with_interim(int socket);
  // The answer this thread is writing ends its connection (and says so: Connection: close).
  static void close_after_response(httplib::Response& res);

 private:
  bool process_and_close_socket(int sock) override;
  std::optional<Refusal> serve_connection(SocketStream& stream, OpenConnection& connection);
  bool wait_for_request(const SocketStream& stream, bool first) const;
  std::optional<Refusal> take_request(SocketStream& stream, OpenConnection& connection,
                                      std::chrono::steady_clock::time_point since);
  std::optional<Refusal> read_head(SocketStream& stream, std::chrono::steady_clock::time_point since);
  void answer_and_close(int sock, const Refusal& refusal);

  ConnectionLimits limits_;
  ErrorBody error_body_;
  HeadCheck head_check_;
  std::unique_ptr<ConnectionTable> table_;
  std::atomic<bool> closing_{false};
  std::atomic<bool> reads_stopped_{false};
  std::atomic<bool> aborting_{false};
  std::unique_ptr<Closer> closer_;
};

}  // namespace minfer::serve

#endif  // MINFER_HAVE_HTTPLIB
