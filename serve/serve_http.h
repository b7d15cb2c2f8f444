// The HTTP server of `minfer serve`: OpenAI's completions and chat completions API over the continuous-batching
// scheduler (engine/scheduler.h), on cpp-httplib.
//
// Threads: the engine's thread runs Scheduler::run (cli_serve.cpp); httplib's acceptor thread
// hands each connection to a thread of its own (serve/http_server.h), whose handler parses a
// request, submits it, and then waits for its tokens: a non-streaming handler until the request
// ends, a streaming one writing an event per token as they come. Tokens travel from the engine's
// thread to the handler through a per-request channel (a mutex, a condition variable and a vector
// reserved to max_tokens at submission, so that the engine's thread allocates nothing for them).
// A handler whose client has gone (its socket closed, or a write failed) cancels its request.
//
// Shutting down (cli_serve.cpp): drain() answers /health and new completions with 503 while the
// requests in flight finish; then stop_reading() and the scheduler's cancel_all() end what is
// left, and stop() closes the listening socket and, 2 s later, every connection still open.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/scheduler.h"
#include "tokenizers/chat_format.h"
#include "tokenizers/text_tokenizer.h"
#include "serve/serve_access.h"
#include "serve/serve_api.h"

namespace minfer::serve {

struct ServeHttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: a free port
  int64_t max_body_bytes = 1 << 20;
  int64_t max_connections = 64;
  int64_t max_connections_per_client = 64;  // from one peer address
  int head_timeout_ms = 10000;      // a request's line and headers arrive whole within this, or 408
  int body_timeout_ms = 30000;      // and its body within this after them
  int64_t max_head_bytes = 64 * 1024;  // the request line and headers at most, or 431
  ApiLimits limits;
  AccessOptions access;             // the API key, and the Host and Origin headers served
  std::string model_name;           // the id /v1/models lists and answers echo by default
  std::string chat_template;        // --chat-template NAME; "" for the model's own
};

class ServeHttp {
 public:
  // `tokenizer` may be null (id prompts only); the scheduler and tokenizer outlive the server.
  ServeHttp(Scheduler& scheduler, const ModelInfo& info, const TextTokenizer* tokenizer, ServeHttpOptions options);
  ~ServeHttp();
  ServeHttp(const ServeHttp&) = delete;
  ServeHttp& operator=(const ServeHttp&) = delete;

  int bind();     // binds host:port; returns the port (throws Error)
  bool listen();  // serves until stop(); false when the listening socket failed
  void drain();   // /health and new completions answer 503; kept-alive connections close
  void stop_reading();  // after the grace period: reads fail (a body still arriving), answers are
                        // written, a request submitted from now on is cancelled
  void stop();    // closes the listening socket; listen() returns once every connection ended (cut
                  // after 2 s, whatever its client does)
  // The engine's thread died: every handler waiting for tokens answers 500 with this message.
  void engine_failed(const std::string& message);

  int64_t in_flight() const;    // completion requests being answered
  // The chat template /v1/chat/completions uses ("" when the route refuses chats), and why not.
  std::string chat_template_name() const;
  std::string chat_refusal() const;
  FinishCounts finished() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace minfer::serve
