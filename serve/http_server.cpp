#include "serve/http_server.h"

#if MINFER_HAVE_HTTPLIB

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "serve/http_framing.h"

namespace minfer::serve {

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

std::string seconds_text(int ms) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", ms / 1000.0);
  return text;
}

// The answer to a connection evicted before its request head was whole (ConnectionTable::admit).
Refusal evicted_refusal() {
  return {503,
          "another connection took this one's place before its request head was whole (--max-connections, "
          "--max-connections-per-client)",
          "too_many_connections", ""};
}

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

// httplib's task queue, one connection per task: a thread per connection (made when none is idle,
// kept for the next), and at most `max_open` of them. The acceptor thread runs a connection over
// the limit itself, marked, and ConnectionServer answers it 503 without reading it. (ConnectionTable
// decides which connections are served; this bounds the threads, those refusing and evicting too.)
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

// A connection as ConnectionTable knows it; it lives on its thread's stack, in the table from
// admit() to remove().
struct OpenConnection {
  OpenConnection(int s, std::string c) : sock(s), client(std::move(c)) {}
  const int sock;
  const std::string client;  // the peer's address
  bool waiting = true;       // for a whole request head, or idle between requests: may be evicted
  Clock::time_point since = Clock::now();  // when it began waiting
  std::atomic<bool> evicted{false};        // another connection took its place: it ends
};

// The open connections, by client. Every change is made under one lock, so that a connection is
// evicted only while it waits, and its socket is still open when it is shut.
class ConnectionTable {
 public:
  ConnectionTable(size_t max_open, size_t max_per_client) : max_open_(max_open), max_per_client_(max_per_client) {}

  // Takes `c` in, evicting the oldest waiting connection of its client when the client is at its
  // share, or of any client when every connection is open; the refusal when there is none.
  std::optional<Refusal> admit(OpenConnection& c) {
    std::lock_guard<std::mutex> lock(mutex_);
    // (A share of the whole pool is the pool's limit, and named so.)
    const bool at_share = count_of(c.client) >= max_per_client_ && max_per_client_ < max_open_;
    if (at_share || open_ >= max_open_) {
      OpenConnection* victim = oldest_waiting(at_share ? &c.client : nullptr);
      if (victim == nullptr)
        return Refusal{503,
                       at_share ? "too many open connections from " + c.client + " (--max-connections-per-client " +
                                      std::to_string(max_per_client_) + ")"
                                : "too many open connections (--max-connections " + std::to_string(max_open_) + ")",
                       "too_many_connections", ""};
      evict(*victim);
    }
    ++per_client_[c.client];
    ++open_;
    connections_.push_back(&c);
    pressure_ = open_ * 4 > max_open_ * 3;
    return std::nullopt;
  }

  // Before its socket is closed.
  void remove(OpenConnection& c) {
    std::lock_guard<std::mutex> lock(mutex_);
    connections_.erase(std::find(connections_.begin(), connections_.end(), &c));
    if (!c.evicted) release(c);
  }

  // Its head is whole and passed: it is busy with a request until finish_request. False when it
  // was evicted first.
  bool start_request(OpenConnection& c) {
    std::lock_guard<std::mutex> lock(mutex_);
    c.waiting = false;
    return !c.evicted;
  }
  void finish_request(OpenConnection& c) {
    std::lock_guard<std::mutex> lock(mutex_);
    c.waiting = true;
    c.since = Clock::now();
  }

  // More than 3/4 of the connections are open: heads have a quarter of their deadline.
  const std::atomic<bool>& pressure() const { return pressure_; }

 private:
  size_t count_of(const std::string& client) const {
    const auto it = per_client_.find(client);
    return it == per_client_.end() ? 0 : it->second;
  }

  OpenConnection* oldest_waiting(const std::string* client) const {
    OpenConnection* oldest = nullptr;
    for (OpenConnection* c : connections_)
      if (c->waiting && !c->evicted && (client == nullptr || c->client == *client) &&
          (oldest == nullptr || c->since < oldest->since))
        oldest = c;
    return oldest;
  }

  // Its thread sees the flag, or wakes from its wait on the socket shut for reading, and ends.
  void evict(OpenConnection& c) {
    c.evicted = true;
    ::shutdown(c.sock, SHUT_RD);
    release(c);
  }

  void release(const OpenConnection& c) {
    const auto it = per_client_.find(c.client);
    if (--it->second == 0) per_client_.erase(it);
    --open_;
    pressure_ = open_ * 4 > max_open_ * 3;
  }

  const size_t max_open_, max_per_client_;
  std::mutex mutex_;
  std::vector<OpenConnection*> connections_;
  std::unordered_map<std::string, size_t> per_client_;  // connections not evicted, by client
  size_t open_ = 0;                                      // the same, all clients
  std::atomic<bool> pressure_{false};
};

// A connection's socket as httplib's Stream. The front door reads each request's head and body
// from the socket through a buffer, each wait not past the request's deadline (read_head,
// read_body); httplib then reads the canonical request made of them (replay), and nothing else.
// Writes wait at most the server's write timeout. Every wait is cut into 0.1 s slices that give up
// once `aborting` is set (reads also once `reads_stopped` or `evicted` is).
class SocketStream final : public httplib::Stream {
 public:
  struct Flags {
    const std::atomic<bool>& reads_stopped;
    const std::atomic<bool>& aborting;
    const std::atomic<bool>& evicted;
    const std::atomic<bool>& pressure;  // reads have their shorter deadline while it is set
  };
  SocketStream(int sock, int write_timeout_ms, size_t max_head_bytes, Flags flags)
      : sock_(sock), write_timeout_ms_(write_timeout_ms), buffer_(max_head_bytes + kChunk), flags_(flags) {}

  bool buffered() const { return begin_ < end_; }
  bool is_readable() const override { return replay_left(); }
  bool is_writable() const override { return wait(POLLOUT, write_timeout_ms_); }
  bool aborted() const { return flags_.aborting || flags_.reads_stopped || flags_.evicted; }
  bool evicted() const { return flags_.evicted; }
  // httplib did not read the whole request it was handed (an answer made before its body was read).
  bool replay_left() const { return replayed_ < replay_.size(); }

  // Reads fail from `deadline` on (Clock::time_point::max(): none), and from `pressed` on while
  // the server is under pressure; writes only wait their timeout.
  void set_deadline(Clock::time_point deadline, Clock::time_point pressed = Clock::time_point::max()) {
    deadline_ = deadline;
    pressed_deadline_ = pressed;
  }
  bool past_pressed_deadline() const { return flags_.pressure && Clock::now() >= pressed_deadline_; }

  enum class Read { whole, closed, late, too_large };
  // Receives until the buffer holds a whole head (up to the blank line that ends the headers, or a
  // bare LF's, to be refused), within the deadline and max_head_bytes. Empty lines before a request
  // line are dropped (RFC 9112, 2.2).
  Read read_head() {
    const size_t max_head = buffer_.size() - kChunk;
    for (size_t scanned = begin_;;) {
      while (end_ - begin_ >= 2 && buffer_[begin_] == '\r' && buffer_[begin_ + 1] == '\n') begin_ += 2;
      for (scanned = std::max(scanned, begin_); scanned < end_; ++scanned)
        if (buffer_[scanned] == '\n' && ends_head(scanned)) {
          head_end_ = scanned + 1;
          return Read::whole;
        }
      if (end_ - begin_ >= max_head) return Read::too_large;
      scanned -= begin_;
      const Read r = receive_more();
      if (r != Read::whole) return r;
    }
  }
  std::string_view head() const { return {buffer_.data() + begin_, head_end_ - begin_}; }

  // Reads the body `head` announces, after the head, into `body` (the limits bound it); `refusal`
  // says why a chunked body was refused (Read::too_large).
  Read read_body(const RequestHead& head, const FramingLimits& limits, std::string& body, Refusal& refusal) {
    begin_ = head_end_;
    if (head.body == RequestHead::Body::length) body.reserve(static_cast<size_t>(head.content_length));
    ChunkedDecoder chunks(limits);
    for (;;) {
      if (head.body == RequestHead::Body::chunked) {
        size_t used = 0;
        const auto state = chunks.feed(buffer_.data() + begin_, end_ - begin_, used, body);
        begin_ += used;
        if (state == ChunkedDecoder::State::done) return Read::whole;
        if (state == ChunkedDecoder::State::refused) {
          refusal = chunks.refusal();
          return Read::too_large;
        }
      } else {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(head.content_length - body.size(), end_ - begin_));
        body.append(buffer_.data() + begin_, n);
        begin_ += n;
        if (body.size() == head.content_length) return Read::whole;
      }
      const Read r = receive_more();
      if (r != Read::whole) return r;
    }
  }

  // What httplib reads next: the canonical request (serve/http_framing.h).
  void replay(std::string request) {
    replay_ = std::move(request);
    replayed_ = 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, replay_.size() - replayed_);
    std::memcpy(ptr, replay_.data() + replayed_, n);
    replayed_ += n;
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
  static constexpr size_t kChunk = 4096;

  // The '\n' at `i` ends the head: the line it ends is empty, or only "\r".
  bool ends_head(size_t i) const {
    return (i >= begin_ + 1 && buffer_[i - 1] == '\n') ||
           (i >= begin_ + 2 && buffer_[i - 1] == '\r' && buffer_[i - 2] == '\n');
  }

  // Moves what is buffered to the front and receives more after it, within the deadline.
  Read receive_more() {
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    head_end_ -= std::min(head_end_, begin_);
    begin_ = 0;
    if (!wait(POLLIN, std::numeric_limits<int>::max())) return aborted() ? Read::closed : Read::late;
    ssize_t n;
    do n = ::recv(sock_, buffer_.data() + end_, buffer_.size() - end_, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return Read::closed;
    end_ += static_cast<size_t>(std::max<ssize_t>(n, 0));
    return Read::whole;
  }

  // Waits up to `timeout_ms` for `events` (and for POLLIN not past the deadline), in slices that
  // check for an abort.
  bool wait(short events, int timeout_ms) const {
    const auto limit = events == POLLIN ? deadline_ : Clock::time_point::max();
    const auto end = std::min(limit, Clock::now() + std::chrono::milliseconds(timeout_ms));
    for (;;) {
      if (flags_.aborting || (events == POLLIN && aborted())) return false;
      const auto now = Clock::now();
      if (now >= end || (events == POLLIN && past_pressed_deadline())) return false;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - now).count() + 1;
      if (wait_socket(sock_, events, static_cast<int>(std::min<int64_t>(left, 100)))) return true;
    }
  }

  int sock_;
  int write_timeout_ms_;
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0, head_end_ = 0;
  std::string replay_;
  size_t replayed_ = 0;
  Flags flags_;
  Clock::time_point deadline_ = Clock::time_point::max();
  Clock::time_point pressed_deadline_ = Clock::time_point::max();
};

// Closes refused connections in the background, each lingering up to 100 ms (close_lingering), so
// that the acceptor goes back to accepting at once. At most kMaxPending wait; one more is closed
// at once.
class Closer {
 public:
  Closer() : thread_([this] { run(); }) {}
  ~Closer() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_one();
    thread_.join();
    for (const auto& p : pending_) ::close(p.sock);
  }

  void add(int sock) {
    ::shutdown(sock, SHUT_WR);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (pending_.size() < kMaxPending) {
        pending_.push_back({sock, Clock::now() + std::chrono::milliseconds(100)});
        sock = -1;
      }
    }
    if (sock >= 0) ::close(sock);
    else changed_.notify_one();
  }

 private:
  static constexpr size_t kMaxPending = 1024;
  struct Pending {
    int sock;
    Clock::time_point deadline;
  };

  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
      std::vector<Pending> batch;
      batch.swap(pending_);
      lock.unlock();
      std::vector<Pending> still = drain(batch);
      lock.lock();
      pending_.insert(pending_.end(), still.begin(), still.end());
      if (!still.empty()) changed_.wait_for(lock, std::chrono::milliseconds(10));
    }
  }

  // Reads and drops what each peer still sends; closes those that closed, failed or are past
  // their deadline, and returns the rest.
  static std::vector<Pending> drain(const std::vector<Pending>& batch) {
    std::vector<Pending> still;
    char sink[4096];
    const auto now = Clock::now();
    for (const Pending& p : batch) {
      ssize_t n;
      int reads = 0;  // at most 64 KiB a pass: a peer that floods cannot hold this thread
      do n = ::recv(p.sock, sink, sizeof(sink), MSG_DONTWAIT);
      while (n > 0 && ++reads < 16);
      const bool open = n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
      if (open && now < p.deadline) still.push_back(p);
      else ::close(p.sock);
    }
    return still;
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Pending> pending_;
  bool stopping_ = false;
  std::thread thread_;
};

ConnectionServer::ConnectionServer(ConnectionLimits limits, ErrorBody error_body)
    : limits_(limits),
      error_body_(std::move(error_body)),
      table_(std::make_unique<ConnectionTable>(limits.max_connections, limits.max_per_client)),
      closer_(std::make_unique<Closer>()) {
  new_task_queue = [this] { return new ConnectionPool(2 * limits_.max_connections); };
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

ConnectionServer::~ConnectionServer() = default;

void ConnectionServer::close_kept_alive() { closing_ = true; }

void ConnectionServer::stop_reading() {
  closing_ = true;
  reads_stopped_ = true;
}

void ConnectionServer::abort_connections() {
  closing_ = true;
  aborting_ = true;
}

int ConnectionServer::current_socket() { return t_socket; }

ConnectionServer::Peer ConnectionServer::peer_state(int socket) {
  if (socket < 0) return Peer::open;
  pollfd p{socket, POLLRDHUP, 0};
  int n;
  do n = ::poll(&p, 1, 0);
  while (n < 0 && errno == EINTR);
  if (n <= 0) return Peer::open;
  if ((p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0) return Peer::gone;
  return (p.revents & POLLRDHUP) != 0 ? Peer::half_closed : Peer::open;
}

bool ConnectionServer::probe_with_interim(int socket) {
  static const char kInterim[] = "HTTP/1.1 100 Continue\r\n\r\n";
  ssize_t n;
  do n = ::send(socket, kInterim, sizeof(kInterim) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof(kInterim) - 1);
}

void ConnectionServer::close_after_response(httplib::Response& res) {
  t_close_after = true;
  res.set_header("Connection", "close");
}

// An answer the server makes without httplib, on a connection that then closes in the background
// (its send buffer takes the whole answer at once: nothing has been written to it before).
void ConnectionServer::answer_and_close(int sock, const Refusal& refusal) {
  const std::string body = error_body_(refusal);
  const std::string answer = "HTTP/1.1 " + std::to_string(refusal.status) + " " + reason_phrase(refusal.status) +
                             "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                             "\r\n" + refusal.headers + "Connection: close\r\n\r\n" + body;
  (void)::send(sock, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  closer_->add(sock);
}

// Reads a request's head within the head deadline (a quarter of it while the server is under
// pressure) and size; the refusal when it does not come whole (status 0: none, to a peer that
// left or a server that is aborting).
std::optional<Refusal> ConnectionServer::read_head(SocketStream& stream, Clock::time_point since) {
  const auto deadline = since + std::chrono::milliseconds(limits_.head_timeout_ms);
  stream.set_deadline(deadline, since + std::chrono::milliseconds(limits_.head_timeout_ms / 4));
  const SocketStream::Read read = stream.read_head();
  if (read == SocketStream::Read::whole) return std::nullopt;
  if (stream.evicted()) return evicted_refusal();
  if (read == SocketStream::Read::too_large)
    return Refusal{431, "the request line and headers are over " + std::to_string(limits_.max_head_bytes) + " bytes",
                   "", ""};
  if (read == SocketStream::Read::closed) return Refusal{};
  if (Clock::now() < deadline)
    return Refusal{408, "the request line and headers did not arrive within " +
                            seconds_text(limits_.head_timeout_ms / 4) +
                            " s (a quarter of --header-timeout while most connections are open)", "", ""};
  return Refusal{408, "the request line and headers did not arrive within " + seconds_text(limits_.head_timeout_ms) +
                          " s (--header-timeout)", "", ""};
}

// Reads the next request, its head within the head deadline and size and its body within the body
// deadline and size, checks its framing (serve/http_framing.h) and its head (set_head_check), and
// hands the stream its canonical form for httplib to read: nothing is returned then. Else the
// refusal to answer (status 0: none).
std::optional<Refusal> ConnectionServer::take_request(SocketStream& stream, OpenConnection& connection,
                                                      Clock::time_point since) {
  if (std::optional<Refusal> refusal = read_head(stream, since)) return refusal;
  const FramingLimits framing{FramingLimits{}.max_line_bytes, limits_.max_body_bytes};
  RequestHead head;
  Refusal refusal;
  if (!parse_request_head(stream.head(), framing, head, refusal)) return refusal;
  if (head_check_)
    if (std::optional<Refusal> refused = head_check_(head)) return refused;
  if (!table_->start_request(connection))
    return evicted_refusal();
  stream.set_deadline(Clock::now() + std::chrono::milliseconds(limits_.body_timeout_ms));
  if (head.expects_continue) (void)probe_with_interim(connection.sock);  // the client waits for it to send its body
  std::string body;
  switch (stream.read_body(head, framing, body, refusal)) {
    case SocketStream::Read::too_large: return refusal;
    case SocketStream::Read::late:
      return Refusal{408, "the request body did not arrive within " + seconds_text(limits_.body_timeout_ms) +
                              " s (--body-timeout)", "", ""};
    case SocketStream::Read::closed: return Refusal{};
    case SocketStream::Read::whole: break;
  }
  stream.set_deadline(Clock::time_point::max());
  stream.replay(canonical_request(head, body));
  return std::nullopt;
}

// Waits for the first bytes of the next request: false when the connection is idle past the
// keep-alive timeout or (for its first request, while the server is under pressure) past a quarter
// of the head deadline, closed, or (after its first request) the server is closing or has evicted
// it (an evicted connection that never sent a request is answered 503 by read_head).
bool ConnectionServer::wait_for_request(const SocketStream& stream, bool first) const {
  if (stream.buffered()) return true;
  const auto deadline = Clock::now() + std::chrono::seconds(first ? read_timeout_sec_ : keep_alive_timeout_sec_);
  while (Clock::now() < deadline) {
    if (stream.evicted()) return first;
    if ((!first && closing_) || stream.aborted() || stream.past_pressed_deadline()) return false;
    if (wait_socket(stream.socket(), POLLIN, 100)) return first || !stream.evicted();
  }
  return false;
}

// Serves requests on the connection until it ends; the refusal to answer before it closes.
std::optional<Refusal> ConnectionServer::serve_connection(SocketStream& stream, OpenConnection& connection) {
  // Compression would hold back a stream of events until the end: answers go uncompressed.
  auto no_compression = [](httplib::Request& req) { req.headers.erase("Accept-Encoding"); };
  bool first = true;
  const Clock::time_point accepted = Clock::now();
  stream.set_deadline(Clock::time_point::max(), accepted + std::chrono::milliseconds(limits_.head_timeout_ms / 4));
  for (size_t left = keep_alive_max_count_; left > 0 && wait_for_request(stream, first); --left, first = false) {
    // The first request's head is due head_timeout after the connection came (an idle wait does
    // not extend it); a kept-alive one's after its first byte.
    if (std::optional<Refusal> refusal = take_request(stream, connection, first ? accepted : Clock::now()))
      return refusal;
    t_close_after = false;
    bool connection_closed = false;
    const bool last = left == 1 || closing_;
    const bool ok = process_request(stream, last, connection_closed, no_compression);
    if (!ok || connection_closed || last || t_close_after || stream.aborted() || stream.replay_left()) break;
    table_->finish_request(connection);
  }
  return std::nullopt;
}

bool ConnectionServer::process_and_close_socket(int sock) {
  if (t_over_limit) {
    answer_and_close(sock, {503, "too many open connections (--max-connections " + std::to_string(limits_.max_connections) + ")",
                            "too_many_connections", ""});
    return true;
  }
  std::string client;
  int port = 0;
  address_of(sock, true, client, port);
  OpenConnection connection(sock, client);
  if (std::optional<Refusal> refusal = table_->admit(connection)) {
    answer_and_close(sock, *refusal);
    return true;
  }
  t_socket = sock;
  SocketStream stream(sock, to_ms(write_timeout_sec_, write_timeout_usec_), limits_.max_head_bytes,
                      {reads_stopped_, aborting_, connection.evicted, table_->pressure()});
  const std::optional<Refusal> refusal = serve_connection(stream, connection);
  t_socket = -1;
  t_close_after = false;
  table_->remove(connection);  // before its socket closes: an eviction shuts only open sockets
  if (refusal && refusal->status != 0) answer_and_close(sock, *refusal);
  else close_lingering(sock, stream.aborted() ? 0 : 1000);
  return true;
}

}  // namespace minfer::serve

#endif  // MINFER_HAVE_HTTPLIB
