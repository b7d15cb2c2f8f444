// The client side of `minfer bench-serve --url`: a trace (engine/serve_trace.h) replayed against a
// running server's /v1/completions with streaming, timed at the client as vLLM's serving benchmark
// times it: a request starts when it is sent, its first token arrives with the first event that
// carries one, and it ends with [DONE].
#pragma once

#include <string>
#include <vector>

#include "engine/serve_trace.h"

namespace minfer::serve {

// What the trace needs to know of the server: from minfer serve, GET /v1/models (which adds
// vocab_size and bos_id to OpenAI's fields) and /metrics; from llama.cpp's llama-server, the
// model's meta in /v1/models, /props and /tokenize. Throws Error when it cannot be reached or is
// neither.
struct ServerInfo {
  std::string model;
  int64_t n_ctx = 0, vocab_size = 0, slots = -1;  // slots -1: not said
  int64_t max_prompt_tokens = 0, max_tokens_limit = 0;  // the server's limits per request
  int32_t bos_id = -1;
};
ServerInfo query_server(const std::string& url);

// Sends each request of `trace` at its arrival time (at most `connections` at once; later ones
// wait for a free connection, which counts in their time to first token) to the server at `url`
// ("http://127.0.0.1:8080"), with token-id prompts, the trace's max_tokens, temperature and seed,
// and ignore_eos. A request's times count from its arrival in the trace, so a wait for a free
// connection is part of its time to first token. Busy slots over time come from polling /metrics
// every 50 ms. Throws Error on a refused connection, an HTTP error (with the server's message), a
// malformed stream, or a completion shorter than asked for, naming the request.
ServeRun replay_http(const std::string& url, const std::vector<TraceRequest>& trace, int connections);

}  // namespace minfer::serve
