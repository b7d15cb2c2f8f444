#include "tools/http_server.h"

#if MINFER_HAVE_HTTPLIB

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"

namespace minfer::cli {

namespace {

thread_local int t_socket = -1;           // the connection this thread serves
thread_local bool t_close_after = false;  // its current answer ends it
thread_local bool t_over_limit = false;   // the acceptor runs this connection only to refuse it

using Clock = std::chrono::steady_clock;

// poll() for `events` on one socket, retried on EINTR; true when it is ready (or failed, which
// the read or write that follows reports).
bool wait_socket(int sock, short events, int timeout_ms) {
  pollfd p{sock, events, 0};
  for (;;) {
    const int n = ::poll(&p, 1, timeout_ms);
    if (n >= 0) return n > 0;
    if (errno != EINTR) return true;
  }
}

int to_ms(time_t sec, time_t usec) { return static_cast<int>(sec * 1000 + usec / 1000); }

// Closes after the peer has had the chance to read the answer: our side is shut for writing, and
// what the peer still sends (an unread body) is read and dropped until it closes too or
// `linger_ms` passes. Closing with unread bytes would send a reset that can destroy the answer
// before the peer reads it.
void close_lingering(int sock, int linger_ms) {
  ::shutdown(sock, SHUT_WR);
  const auto deadline = Clock::now() + std::chrono::milliseconds(linger_ms);
  char drain[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0 || !wait_socket(sock, POLLIN, static_cast<int>(left))) break;
    const ssize_t n = ::recv(sock, drain, sizeof(drain), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
  }
  ::close(sock);
}

void address_of(int sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  sockaddr* a = reinterpret_cast<sockaddr*>(&address);
  const int r = peer ? ::getpeername(sock, a, &length) : ::getsockname(sock, a, &length);
  char host[NI_MAXHOST], service[NI_MAXSERV];
  if (r != 0 || ::getnameinfo(a, length, host, sizeof(host), service, sizeof(service),
                              NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    ip.clear();
    port = -1;
    return;
  }
  ip = host;
  port = std::atoi(service);
}

// httplib's task queue, one connection per task: a thread per open connection (made when none is
// idle, kept for the next), and at most `max_open` of them. The acceptor thread runs a connection
// over the limit itself, marked, and ConnectionServer answers it 503 without reading it.
class ConnectionPool : public httplib::TaskQueue {
 public:
  explicit ConnectionPool(size_t max_open) : max_open_(max_open) {}
  ~ConnectionPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (open_ < max_open_) {
        ++open_;
        jobs_.push_back(std::move(fn));
        // Every waiting job needs an idle thread of its own: a connection can take minutes.
        if (jobs_.size() > idle_) threads_.emplace_back([this] { work(); });
        else ready_.notify_one();
        return;
      }
    }
    t_over_limit = true;
    fn();
    t_over_limit = false;
  }

  // Waits for every connection to end (httplib calls it once the listening socket is closed).
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  void work() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ++idle_;
      ready_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      fn();
      fn = nullptr;
      lock.lock();
      --open_;
    }
  }

  const size_t max_open_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t open_ = 0, idle_ = 0;
  bool stopping_ = false;
};

}  // namespace

// A connection's socket as httplib's Stream: reads through a buffer (httplib reads the request
// line and headers a byte at a time), each read and write waiting at most the server's timeouts.
class SocketStream final : public httplib::Stream {
 public:
  SocketStream(int sock, int read_timeout_ms, int write_timeout_ms)
      : sock_(sock), read_timeout_ms_(read_timeout_ms), write_timeout_ms_(write_timeout_ms) {}

  bool buffered() const { return begin_ < end_; }
  bool is_readable() const override { return buffered() || wait_socket(sock_, POLLIN, read_timeout_ms_); }
  bool is_writable() const override { return wait_socket(sock_, POLLOUT, write_timeout_ms_); }

  ssize_t read(char* ptr, size_t size) override {
    if (!buffered()) {
      if (!wait_socket(sock_, POLLIN, read_timeout_ms_)) return -1;
      ssize_t n;
      do n = ::recv(sock_, buffer_, sizeof(buffer_), MSG_DONTWAIT);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;  // 0: the peer closed its side
      begin_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, end_ - begin_);
    std::memcpy(ptr, buffer_ + begin_, n);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = ::send(sock_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;  // httplib's write loop tries again
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, false, ip, port); }
  int socket() const override { return sock_; }

 private:
  int sock_;
  int read_timeout_ms_, write_timeout_ms_;
  char buffer_[4096];
  size_t begin_ = 0, end_ = 0;
};

ConnectionServer::ConnectionServer(size_t max_connections, std::string refusal_body)
    : max_connections_(max_connections), refusal_body_(std::move(refusal_body)) {
  new_task_queue = [this] { return new ConnectionPool(max_connections_); };
  // note: httplib's default sets SO_REUSEPORT, with which a second server binds the same port and
  // the two share its connections; SO_REUSEADDR alone still lets a restart reuse the port at once.
  set_socket_options([](int sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
}

int ConnectionServer::bind(const std::string& host, int port) {
  errno = 0;
  const int bound = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
  if (bound <= 0)
    fail("cannot listen on ", host, ":", port, errno != 0 ? std::string(": ") + std::strerror(errno) : std::string());
  // note: httplib 0.11 listens with a backlog of 5; many clients connecting at once would have
  // their SYNs dropped and retried a second later. listen() again only resizes the backlog.
  ::listen(svr_sock_, 128);
  return bound;
}

void ConnectionServer::close_kept_alive() { closing_ = true; }

int ConnectionServer::current_socket() { return t_socket; }

bool ConnectionServer::peer_closed(int socket) {
  if (socket < 0) return false;
  pollfd p{socket, POLLRDHUP, 0};
  int n;
  do n = ::poll(&p, 1, 0);
  while (n < 0 && errno == EINTR);
  return n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

void ConnectionServer::close_after_response(httplib::Response& res) {
  t_close_after = true;
  res.set_header("Connection", "close");
}

void ConnectionServer::refuse(int sock) const {
  const std::string answer = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
                             std::to_string(refusal_body_.size()) + "\r\nConnection: close\r\n\r\n" + refusal_body_;
  // The socket is fresh: its send buffer takes the whole answer at once.
  (void)::send(sock, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  close_lingering(sock, 100);
}

// Waits for the first bytes of the next request: false when the connection is idle past the
// keep-alive timeout, closed, or (after its first request) the server is closing.
bool ConnectionServer::wait_for_request(const SocketStream& stream, bool first) const {
  if (stream.buffered()) return true;
  const auto deadline = Clock::now() + std::chrono::seconds(first ? read_timeout_sec_ : keep_alive_timeout_sec_);
  while (Clock::now() < deadline) {
    if (!first && closing_) return false;
    if (wait_socket(stream.socket(), POLLIN, 100)) return true;
  }
  return false;
}

bool ConnectionServer::process_and_close_socket(int sock) {
  if (t_over_limit) {
    refuse(sock);
    return true;
  }
  t_socket = sock;
  SocketStream stream(sock, to_ms(read_timeout_sec_, read_timeout_usec_),
                      to_ms(write_timeout_sec_, write_timeout_usec_));
  // Compression would hold back a stream of events until the end: answers go uncompressed.
  auto no_compression = [](httplib::Request& req) { req.headers.erase("Accept-Encoding"); };
  bool first = true;
  for (size_t left = keep_alive_max_count_; left > 0 && wait_for_request(stream, first); --left, first = false) {
    t_close_after = false;
    bool connection_closed = false;
    const bool last = left == 1 || closing_;
    const bool ok = process_request(stream, last, connection_closed, no_compression);
    if (!ok || connection_closed || last || t_close_after) break;
  }
  t_socket = -1;
  t_close_after = false;
  close_lingering(sock, 1000);
  return true;
}

}  // namespace minfer::cli

#endif  // MINFER_HAVE_HTTPLIB
