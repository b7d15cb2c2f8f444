#include "serve/serve_http.h"

#if MINFER_HAVE_HTTPLIB

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/splitmix.h"
#include "serve/http_server.h"
#include "serve/logprobs_json.h"
#include "serve/serve_routes.h"
#include "serve/serve_tokenize.h"

namespace minfer::serve {

namespace {

using json = nlohmann::ordered_json;
using httplib::Request;
using httplib::Response;

constexpr auto kPollInterval = std::chrono::milliseconds(50);  // how often a waiting handler checks its client

// One choice of a request (`n` of them: each a request of the scheduler's), guarded by its channel's mutex.
struct Choice {
  std::vector<int32_t> ids;  // reserved to max_tokens at submission: pushes allocate nothing
  bool finished = false;
  FinishReason reason = FinishReason::stop;
  int64_t cached_tokens = 0;  // what the client is told of its cached prompt tokens (client_cached_tokens)
  // With logprobs: each token's entries, its own and the most likely ones' (reserved at submission).
  std::vector<TokenLogprob> logprobs;
  size_t per_token = 0;  // 1 + top_logprobs; 0 without logprobs
  // With echo and logprobs: the entries of the prompt's tokens after the first (reserved at submission).
  std::vector<TokenLogprob> prompt_logprobs;
  // The engine's thread only: stop strings found as the tokens come, so that the choice ends at
  // the token that completes one.
  StopMatcher stop;
  int32_t prev = -1;
  // What a handler reads of it: its tokens from `from` on, and how it stands.
  Choice read(size_t from) const {
    Choice c;
    c.ids.assign(ids.begin() + static_cast<std::ptrdiff_t>(std::min(from, ids.size())), ids.end());
    c.per_token = per_token;
    if (from == 0) c.prompt_logprobs = prompt_logprobs;  // complete once a token came or the choice ended
    c.logprobs.assign(logprobs.begin() + static_cast<std::ptrdiff_t>(std::min(from * per_token, logprobs.size())),
                      logprobs.end());
    c.finished = finished;
    c.reason = reason;
    c.cached_tokens = cached_tokens;
    return c;
  }
};

// One request's tokens on their way from the engine's thread to its handler.
struct Channel {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Choice> choices;  // sized at submission
  bool wake_per_token = false;  // a stream's handler wakes for each token; a whole answer's at the end
  const TokenPieces* pieces = nullptr;
  // Whether a handler has work: for a whole answer, every choice finished; for a stream, a choice
  // not yet done (seen[i] < SIZE_MAX) has tokens past seen[i] or has finished.
  bool ready(const std::vector<size_t>& seen, bool whole) const {
    for (size_t i = 0; i < choices.size(); ++i) {
      if (whole && !choices[i].finished) return false;
      if (!whole && seen[i] != SIZE_MAX && (choices[i].ids.size() > seen[i] || choices[i].finished)) return true;
    }
    return whole;
  }
};

// A completion request in flight, counted while its handler (or its stream) lives.
class InFlight {
 public:
  explicit InFlight(std::atomic<int64_t>& count) : count_(count) { ++count_; }
  ~InFlight() { --count_; }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  std::atomic<int64_t>& count_;
};

std::string sse_event(const json& value) { return "data: " + dump_json(value) + "\n\n"; }

// The text of prompt ids, each token's bytes after the one before it (echo of an id prompt).
std::string pieces_text(const TokenPieces& pieces, const std::vector<int32_t>& ids) {
  std::string text;
  int32_t prev = -1;
  for (int32_t id : ids) {
    text += pieces.piece(prev, id);
    prev = id;
  }
  return text;
}

// With echo, a stream's first event of a choice: the prompt's text, and with logprobs its tokens'
// (echo_logprobs_json; *text_offset is set past them).
nlohmann::ordered_json echo_event(const CompletionHeader& header, const TokenPieces& pieces, const Choice& choice,
                                  const std::vector<int32_t>& prompt, size_t* text_offset) {
  nlohmann::ordered_json event = stream_chunk_json(header, *header.echo, {}, nullptr);
  if (header.top_logprobs >= 0)
    event["choices"][0]["logprobs"] = echo_logprobs_json(pieces, prompt, choice.prompt_logprobs.data(), nullptr, 0,
                                                         nullptr, choice.per_token, text_offset);
  return event;
}

// splitmix64 over the clock and a counter: a seed per request that asks for none (never 0).
uint64_t random_seed() {
  static std::atomic<uint64_t> counter{0};
  uint64_t z = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) +
               (++counter) * 0x9E3779B97F4A7C15ull;
  z = splitmix64_finalize(z);
  return z != 0 ? z : 1;
}

constexpr auto kAbortAfter = std::chrono::seconds(2);

const char* default_message(int status) {
  switch (status) {
    case 400: return "malformed HTTP request";
    case 404: return "no such route";
    case 405: return "method not allowed";
    default: return status >= 500 ? "internal server error" : "bad request";
  }
}

}  // namespace

struct ServeHttp::Impl {
  Impl(Scheduler& s, const ModelInfo& i, const TextTokenizer* t, ServeHttpOptions o)
      : scheduler(s), info(i), tokenizer(t), options(std::move(o)),
        server(ConnectionLimits{static_cast<size_t>(options.max_connections),
                                static_cast<size_t>(options.max_connections_per_client), options.head_timeout_ms,
                                options.body_timeout_ms, static_cast<size_t>(options.max_head_bytes),
                                static_cast<uint64_t>(options.max_body_bytes)},
               [](const Refusal& r) {
                 return error_body({r.status, r.message, "",
                                    !r.code.empty() ? r.code : r.status == 413 ? "body_too_large"
                                                              : r.status == 415 ? "unsupported_media_type" : ""});
               }),
        started(static_cast<int64_t>(std::time(nullptr))) {
    if (tokenizer) pieces = std::make_unique<TokenPieces>(*tokenizer);
    load_chat_format();
    if (tokenizer) outputs = std::make_unique<StructuredOutputs>(*tokenizer, *pieces, info.vocab_size, end_ids());
  }

  // Every token that may end an answer: the model's and the chat template's end of turn.
  std::vector<int32_t> end_ids() const {
    std::vector<int32_t> ids = info.stop_ids;
    if (chat) ids.insert(ids.end(), chat->end_of_turn_ids().begin(), chat->end_of_turn_ids().end());
    return ids;
  }

  // The matcher of a request's response_format, grammar or regex (null when it has none), its answer
  // ending at the job's end tokens.
  std::shared_ptr<TokenConstraint> constraint(const CompletionRequest& request, const ServeRequest& job) const {
    if (!request.output) return nullptr;
    const std::string& param = request.output->param;
    if (outputs == nullptr)
      throw ApiError{400, param + " needs the text of the tokens, and this model carries no tokenizer", param, ""};
    if (request.ignore_eos)
      throw ApiError{400, param + " ends the answer where the grammar ends: it cannot be combined with ignore_eos",
                     "ignore_eos", ""};
    std::vector<int32_t> stops = info.stop_ids;
    stops.insert(stops.end(), job.stop_tokens.begin(), job.stop_tokens.end());
    return outputs->constrain(*request.output, stops);
  }

  // The chat template of /v1/chat/completions. One the model lacks or that minfer does not know
  // leaves the route answering 400 with the reason (completions go on); a --chat-template name
  // that does not exist is an error at start-up.
  void load_chat_format() {
    if (tokenizer == nullptr) {
      chat_refusal = "this model carries no tokenizer, so it cannot chat (start minfer serve with -z TOKENIZER)";
      return;
    }
    try {
      chat = std::make_unique<ChatFormat>(*tokenizer, options.chat_template);
    } catch (const Error& e) {
      if (!options.chat_template.empty()) throw;
      chat_refusal = e.what();
    }
  }
  // Its prompt: the ids, the text encoded, or the messages in the template, ending in the
  // assistant's header. A text or a conversation is refused past --max-prompt-tokens (at most the
  // context) as its length or its ids show it (TextTokenizer::encode's max_ids), never encoded whole.
  std::vector<int32_t> prompt_of(const CompletionRequest& request) const {
    const auto max_ids = static_cast<size_t>(options.limits.max_prompt_tokens);
    if (!request.chat) {
      if (!request.text) return request.prompt_ids;
      try {
        return tokenizer->encode(*request.text, true, max_ids);
      } catch (const TooManyTokens& e) {
        throw prompt_over_limit(e, "prompt", options.limits);
      }
    }
    if (!chat) throw ApiError{400, chat_refusal, "messages", "no_chat_template"};
    try {
      return chat->encode(request.messages, true, max_ids, request.tools ? request.tools->tools : std::vector<std::string>{});
    } catch (const TooManyTokens& e) {
      throw prompt_over_limit(e, "messages", options.limits);
    } catch (const Error& e) {
      throw ApiError{400, one_line(e.what(), 400), "messages", ""};  // a conversation the template refuses
    }
  }

  void routes();
  // `authorization`: the request's Authorization header, checked already ("" when none).
  void completions(const std::string& authorization, Response& res, const httplib::ContentReader& read, bool http11,
                   bool chat_route);
  // Choice `index` of a request, as a request of the scheduler's whose tokens go to `channel`.
  ServeRequest choice_job(const CompletionRequest& request, const std::vector<int32_t>& prompt,
                          const std::shared_ptr<Channel>& channel, int64_t index, uint64_t seed, uint64_t scope);
  void cancel_all(const std::vector<uint64_t>& ids);
  // `ids`: the scheduler's id of each choice.
  void answer_whole(Response& res, const CompletionHeader& header, const std::shared_ptr<Channel>& channel,
                    const std::vector<uint64_t>& ids, const std::vector<int32_t>& prompt,
                    const std::vector<std::string>& stops, bool http11);
  class EventStream;  // a streamed answer's events
  void answer_stream(Response& res, const CompletionHeader& header, const std::shared_ptr<Channel>& channel,
                     const std::vector<uint64_t>& ids, const std::vector<int32_t>& prompt,
                     std::vector<std::string> stops, std::shared_ptr<InFlight> flight, bool http11);
  enum class Wait { ready, client_gone, engine_down };
  // Until the channel is ready (Channel::ready), or the client is gone.
  // `may_probe`: a whole answer to an HTTP/1.1 request, whose half-closed client is probed
  // (ConnectionServer::probe_with_interim) instead of taken for gone.
  Wait wait(Channel& channel, const std::vector<size_t>& seen, bool whole, int socket,
            bool may_probe = false) const;
  FinishCounts finished_counts() const { return {finished_stop, finished_length, finished_cancelled}; }
  std::string engine_failure() const {
    std::lock_guard<std::mutex> lock(failure_mutex);
    return failure;
  }

  Scheduler& scheduler;
  const ModelInfo& info;
  const TextTokenizer* tokenizer;
  ServeHttpOptions options;
  std::unique_ptr<TokenPieces> pieces;
  std::unique_ptr<ChatFormat> chat;  // null: chat_refusal says why
  std::unique_ptr<StructuredOutputs> outputs;  // null without a tokenizer
  std::string chat_refusal;
  ConnectionServer server;
  const int64_t started;
  const uint64_t cache_secret = draw_cache_secret();  // keys every cache_scope; never told
  std::atomic<bool> draining{false};
  std::atomic<bool> cancelling{false};  // the grace period is over: every request is cancelled
  std::atomic<int64_t> in_flight{0};
  std::atomic<uint64_t> finished_stop{0}, finished_length{0}, finished_cancelled{0};
  std::atomic<bool> engine_down{false};
  std::atomic<bool> listen_returned{false};
  mutable std::mutex failure_mutex;
  std::string failure;
};

// note: a client that shut its sending side may still be reading (RFC 9112, 9.6). A stream's next
// write tells a closed one from a half-closed one (the first write draws a reset, which the next
// look sees); a whole answer has written nothing yet, so its client is probed with an interim
// 100 Continue, once. Only an HTTP/1.0 client, to which no 1xx may be sent, is taken for gone
// when it half-closes.
ServeHttp::Impl::Wait ServeHttp::Impl::wait(Channel& channel, const std::vector<size_t>& seen, bool whole,
                                            int socket, bool may_probe) const {
  using Peer = ConnectionServer::Peer;
  auto next_check = std::chrono::steady_clock::now() + kPollInterval;
  bool probed = false;
  std::unique_lock<std::mutex> lock(channel.mutex);
  for (;;) {
    if (channel.ready(seen, whole)) return Wait::ready;
    if (std::chrono::steady_clock::now() >= next_check) {
      const Peer peer = ConnectionServer::peer_state(socket);
      if (peer == Peer::gone) return Wait::client_gone;
      if (peer == Peer::half_closed && whole && !probed) {
        if (!may_probe || !ConnectionServer::probe_with_interim(socket)) return Wait::client_gone;
        probed = true;
      }
      if (engine_down) return Wait::engine_down;
      next_check = std::chrono::steady_clock::now() + kPollInterval;
    }
    channel.changed.wait_until(lock, next_check);
  }
}

void ServeHttp::Impl::completions(const std::string& authorization, Response& res, const httplib::ContentReader& read,
                                  bool http11, bool chat_route) {
  auto flight = std::make_shared<InFlight>(in_flight);
  try {
    // (The front door has read the body already, within its limits: serve/http_framing.h.)
    std::string body;
    read([&](const char* data, size_t n) {
      body.append(data, n);
      return true;
    });
    if (draining) throw ApiError{503, "the server is shutting down", "", "shutting_down"};
    CompletionRequest request = chat_route ? parse_chat_request(body, options.limits)
                                           : parse_completion_request(body, info.vocab_size, tokenizer != nullptr,
                                                                      options.limits);
    std::optional<ToolCallParsing> tool_calls;  // serve/tool_calls.h
    if (request.tools && chat) tool_calls = prepare_tool_calls(request, chat->chat_template());
    std::vector<int32_t> prompt = prompt_of(request);
    check_prompt_length(static_cast<int64_t>(prompt.size()), options.limits);
    check_logit_bias(request, info.vocab_size);
    if (request.chat && !request.max_tokens_given)
      request.max_tokens = chat_max_tokens(static_cast<int64_t>(prompt.size()), scheduler.n_ctx(), options.limits);

    if (request.n > scheduler.options().max_queue)
      throw ApiError{400,
                     "n = " + std::to_string(request.n) + " is over this server's queue of " +
                         std::to_string(scheduler.options().max_queue) + " requests (--max-queue): each choice is one",
                     "n", ""};

    auto channel = std::make_shared<Channel>();
    channel->choices.resize(static_cast<size_t>(request.n));
    for (Choice& c : channel->choices) {
      c.ids.reserve(static_cast<size_t>(request.max_tokens));
      c.per_token = request.top_logprobs >= 0 ? static_cast<size_t>(request.top_logprobs) + 1 : 0;
      c.logprobs.reserve(c.per_token * static_cast<size_t>(request.max_tokens));
      if (request.echo) c.prompt_logprobs.reserve(c.per_token * (prompt.size() - 1));
      if (!request.stop.empty()) {
        c.stop = StopMatcher(request.stop, pieces->longest());
        c.prev = prompt.back();
      }
    }
    channel->wake_per_token = request.stream;
    channel->pieces = pieces.get();
    const uint64_t seed = request.seed ? *request.seed : random_seed();
    const uint64_t scope = cache_scope(cache_secret, authorization, request.cache_salt);
    std::vector<ServeRequest> jobs;
    for (int64_t i = 0; i < request.n; ++i)
      jobs.push_back(choice_job(request, prompt, channel, i, choice_seed(seed, i), scope));
    std::vector<uint64_t> ids;
    try {
      for (ServeRequest& job : jobs) ids.push_back(scheduler.submit(std::move(job)));
    } catch (const QueueFullError& e) {
      cancel_all(ids);  // a request gets all its choices queued, or none
      throw ApiError{429, e.what(), "", "queue_full"};
    } catch (const Error& e) {
      cancel_all(ids);
      throw ApiError{400, e.what(), "", ""};
    }
    // A request submitted after the shutdown's last cancel_all() is cancelled here (the flag is set
    // before that call), so that nothing outlives the grace period.
    if (cancelling) cancel_all(ids);
    CompletionHeader header{(request.chat ? "chatcmpl-" : "cmpl-") + std::to_string(ids[0]), request.chat,
                            static_cast<int64_t>(std::time(nullptr)),
                            request.model ? *request.model : options.model_name, request.include_usage,
                            std::move(tool_calls), request.top_logprobs};
    if (request.echo) header.echo = request.text ? *request.text : pieces_text(*pieces, prompt);
    if (request.stream)
      answer_stream(res, header, channel, ids, prompt, std::move(request.stop), std::move(flight), http11);
    else
      answer_whole(res, header, channel, ids, prompt, request.stop, http11);
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

ServeRequest ServeHttp::Impl::choice_job(const CompletionRequest& request, const std::vector<int32_t>& prompt,
                                         const std::shared_ptr<Channel>& channel, int64_t index, uint64_t seed,
                                         uint64_t scope) {
  ServeRequest job;
  job.prompt = prompt;
  job.max_tokens = request.max_tokens;
  job.temperature = request.temperature;
  job.top_p = request.top_p;
  job.sampling = request.sampling;
  job.top_logprobs = request.top_logprobs;
  // echo: the prompt's logprobs when asked for, and computed anyway for max_tokens 0 (the request's
  // only work then is its prompt).
  job.prompt_logprobs = request.echo && (request.top_logprobs >= 0 || request.max_tokens == 0);
  job.top_logprobs = job.prompt_logprobs ? std::max(job.top_logprobs, 0) : job.top_logprobs;
  job.stop_at_eos = !request.ignore_eos;
  // The end of the assistant's turn, unless the request ignores end tokens (as llama-server and vLLM do).
  if (request.chat && !request.ignore_eos) job.stop_tokens = chat->end_of_turn_ids();
  job.seed = seed;
  job.constraint = constraint(request, job);  // a matcher of its own
  job.cache_scope = scope;
  const auto at = static_cast<size_t>(index);
  job.on_token = [channel, at](int32_t token) {
    Choice& c = channel->choices[at];
    bool more = true;
    if (!c.stop.empty()) {
      more = !c.stop.push(channel->pieces->piece(c.prev, token));
      c.prev = token;
    }
    {
      std::lock_guard<std::mutex> lock(channel->mutex);
      c.ids.push_back(token);
    }
    if (channel->wake_per_token) channel->changed.notify_one();
    return more;
  };
  job.on_logprobs = [channel, at](const SampledLogprobs& s) {  // within what was reserved
    std::lock_guard<std::mutex> lock(channel->mutex);
    std::vector<TokenLogprob>& entries = channel->choices[at].logprobs;
    entries.push_back(s.sampled);
    entries.insert(entries.end(), s.top, s.top + s.n_top);
  };
  if (request.echo && request.top_logprobs >= 0)
    job.on_prompt_logprobs = [channel, at](int64_t, const SampledLogprobs& s) {  // within what was reserved
      std::lock_guard<std::mutex> lock(channel->mutex);
      std::vector<TokenLogprob>& entries = channel->choices[at].prompt_logprobs;
      entries.push_back(s.sampled);
      entries.insert(entries.end(), s.top, s.top + s.n_top);
    };
  // (A stream that ends at a stop string may answer before the request has finished: the cached
  // tokens of its usage are known from the admission on.)
  job.on_admit = [channel, at, block_size = scheduler.decoder().cache().block_size()](const RequestStats& stats) {
    std::lock_guard<std::mutex> lock(channel->mutex);
    channel->choices[at].cached_tokens = client_cached_tokens(stats.cached_tokens, block_size);
  };
  // note: `this` outlives every request: cli_serve joins the engine's thread before the server goes.
  job.on_finish = [channel, at, this](const RequestStats& stats) {
    (stats.reason == FinishReason::stop ? finished_stop
     : stats.reason == FinishReason::length ? finished_length
                                            : finished_cancelled)++;
    {
      std::lock_guard<std::mutex> lock(channel->mutex);
      channel->choices[at].finished = true;
      channel->choices[at].reason = stats.reason;
    }
    channel->changed.notify_one();
  };
  return job;
}

void ServeHttp::Impl::cancel_all(const std::vector<uint64_t>& ids) {
  for (uint64_t id : ids) scheduler.cancel(id);
}

void ServeHttp::Impl::answer_whole(Response& res, const CompletionHeader& header,
                                   const std::shared_ptr<Channel>& channel, const std::vector<uint64_t>& ids,
                                   const std::vector<int32_t>& prompt, const std::vector<std::string>& stops,
                                   bool http11) {
  const Wait w = wait(*channel, {}, true, ConnectionServer::current_socket(), http11);
  if (w == Wait::client_gone) {
    cancel_all(ids);
    ConnectionServer::close_after_response(res);
    throw ApiError{499, "the client closed the connection", "", ""};
  }
  if (w == Wait::engine_down) throw ApiError{500, "the engine stopped: " + engine_failure(), "", "engine_failed"};
  std::vector<Choice> choices;
  {
    std::lock_guard<std::mutex> lock(channel->mutex);
    for (const Choice& c : channel->choices) choices.push_back(c.read(0));
  }
  int64_t generated = 0;
  for (const Choice& c : choices) generated += static_cast<int64_t>(c.ids.size());
  for (const Choice& c : choices)
    if (c.reason == FinishReason::cancelled)
      throw ApiError{503, "the server shut down before the completion finished (" + std::to_string(generated) +
                              " tokens generated)", "", "shutting_down"};
  const auto prompt_tokens = static_cast<int64_t>(prompt.size());
  nlohmann::ordered_json answer;
  int64_t cached = prompt_tokens;  // what the request as a whole found cached: its least-cached choice's
  for (size_t i = 0; i < choices.size(); ++i) {
    // The request ended at the token that completed a stop string (the engine's matcher); the text
    // is cut before it. note: the text is made as a stream's events are, token by token
    // (CompletionText), so that a stream adds up to the whole answer, U+FFFDs and stops alike.
    const std::vector<int32_t>& tokens = choices[i].ids;
    CompletionText completion(pieces.get(), prompt.back(), stops);
    std::string text;
    for (size_t t = 0; t < tokens.size() && !completion.stopped(); ++t) text += completion.push(tokens[t]);
    text += completion.finish();
    const char* finish = choices[i].reason == FinishReason::stop || completion.stopped() ? "stop" : "length";
    if (header.echo) text = *header.echo + text;
    nlohmann::ordered_json one = completion_json(header, text, tokens, finish, prompt_tokens, choices[i].cached_tokens);
    if (header.tool_calls) put_tool_calls(one["choices"][0], text, *header.tool_calls);
    size_t offset = 0;
    if (header.top_logprobs >= 0 && header.echo)
      one["choices"][0]["logprobs"] = echo_logprobs_json(*pieces, prompt, choices[i].prompt_logprobs.data(),
                                                         tokens.data(), tokens.size(), choices[i].logprobs.data(),
                                                         choices[i].per_token, &offset);
    else if (header.top_logprobs >= 0)
      one["choices"][0]["logprobs"] = logprobs_json(header.chat, *pieces, prompt.back(), tokens.data(), tokens.size(),
                                                    choices[i].logprobs.data(), choices[i].per_token, &offset);
    one["choices"][0]["index"] = i;
    if (i == 0) answer = std::move(one);
    else answer["choices"].push_back(std::move(one["choices"][0]));
    cached = std::min(cached, choices[i].cached_tokens);
  }
  answer["usage"] = usage_json(prompt_tokens, generated, cached);  // the prompt once, every choice's tokens
  send_json(res, 200, dump_json(answer));
}

// One streamed answer: each choice's events, written as the engine's tokens come. httplib calls
// step() on the connection's thread until it returns false (the connection ends: the client is
// gone) or the stream is done (sink.done()).
class ServeHttp::Impl::EventStream {
 public:
  EventStream(Impl& server, const CompletionHeader& header, std::shared_ptr<Channel> channel,
              std::vector<uint64_t> ids, std::vector<int32_t> prompt, const std::vector<std::string>& stops,
              std::shared_ptr<InFlight> flight)
      : server_(server), header_(header), channel_(std::move(channel)), ids_(std::move(ids)),
        prompt_(std::move(prompt)), flight_(std::move(flight)), socket_(ConnectionServer::current_socket()) {
    for (size_t i = 0; i < ids_.size(); ++i)
      choices_.push_back({CompletionText(server_.pieces.get(), prompt_.back(), stops),
                          header.tool_calls ? std::optional<ToolCallStream>(*header.tool_calls) : std::nullopt,
                          prompt_.back()});
  }

  bool step(httplib::DataSink& sink) {
    std::vector<size_t> seen;
    for (const ChoiceStream& c : choices_) seen.push_back(c.done ? SIZE_MAX : c.sent);
    const Wait w = server_.wait(*channel_, seen, false, socket_);
    if (w == Wait::client_gone) return gone();
    if (w == Wait::engine_down)
      return end_with_error(sink, {500, "the engine stopped: " + server_.engine_failure(), "", "engine_failed"});
    {
      std::lock_guard<std::mutex> lock(channel_->mutex);
      for (size_t i = 0; i < choices_.size(); ++i) now_[i] = channel_->choices[i].read(choices_[i].sent);
    }
    size_t open = 0;  // choices whose last event is still to come
    for (const ChoiceStream& c : choices_) open += c.done ? 0 : 1;
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (choices_[i].done) continue;
      if (!write_opening(sink, i) || !write_tokens(sink, i)) return gone();
      ChoiceStream& c = choices_[i];
      // The engine ends the choice at the same token: the cancel is a no-op then.
      if (c.text.stopped() && !now_[i].finished) server_.scheduler.cancel(ids_[i]);
      if (!now_[i].finished && !c.text.stopped()) continue;
      if (now_[i].reason == FinishReason::cancelled && !c.text.stopped()) {
        size_t sent = 0;
        for (const ChoiceStream& other : choices_) sent += other.sent;
        return end_with_error(sink, {503,
                                     "the server shut down before the completion finished (" +
                                         std::to_string(sent) + " tokens generated)",
                                     "", "shutting_down"});
      }
      nlohmann::ordered_json last;
      if (!finish_choice(sink, i, &last)) return gone();
      if (--open > 0) {
        if (!write_event(sink, sse_event(last))) return gone();
        continue;
      }
      const std::string tail = closing_events(std::move(last)) + "data: [DONE]\n\n";
      if (!write_event(sink, tail)) return false;
      sink.done();
      return true;
    }
    return true;
  }

 private:
  // A choice's part of the stream.
  struct ChoiceStream {
    CompletionText text;
    std::optional<ToolCallStream> tool_calls;  // a chat with tools: its text through the parser
    int32_t prev;                              // the token before the next one (for its logprobs' text)
    size_t text_offset = 0;                    // of the next token's text, with logprobs
    size_t sent = 0;                           // tokens written as events
    bool role_sent = false;                    // a chat stream opens with the assistant's role
    bool echo_sent = false;  // with echo: the prompt's event (its text and logprobs) is written
    bool done = false;       // its last event (its finish_reason) is written
  };

  bool gone() {
    server_.cancel_all(ids_);
    return false;
  }
  bool end_with_error(httplib::DataSink& sink, const ApiError& e) {
    server_.cancel_all(ids_);
    const std::string event = "data: " + error_body(e) + "\n\n";
    sink.write(event.data(), event.size());
    sink.done();
    return true;
  }
  static bool write_event(httplib::DataSink& sink, const std::string& text) {
    return sink.write(text.data(), text.size());
  }
  bool write(httplib::DataSink& sink, nlohmann::ordered_json event, size_t index) {
    event["choices"][0]["index"] = index;
    return write_event(sink, sse_event(event));
  }

  // What comes before choice i's first token, once it has one (or ends): a chat's role event, and
  // with echo the prompt's event.
  bool write_opening(httplib::DataSink& sink, size_t i) {
    ChoiceStream& c = choices_[i];
    const Choice& now = now_[i];
    const bool begun = (!now.ids.empty() || now.finished) && now.reason != FinishReason::cancelled;
    if (header_.chat && !c.role_sent && begun) {
      if (!write(sink, chat_role_chunk_json(header_), i)) return false;
      c.role_sent = true;
    }
    if (header_.echo && !c.echo_sent && begun) {
      if (!write(sink, echo_event(header_, *server_.pieces, now, prompt_, &c.text_offset), i)) return false;
      c.echo_sent = true;
    }
    return true;
  }

  // An event for each of choice i's new tokens, up to a stop string.
  bool write_tokens(httplib::DataSink& sink, size_t i) {
    ChoiceStream& c = choices_[i];
    const Choice& now = now_[i];
    for (size_t k = 0; k < now.ids.size() && !c.text.stopped(); ++k) {
      const int32_t token = now.ids[k];
      std::string text = c.text.push(token);
      if (c.tool_calls) text = c.tool_calls->push(text);
      nlohmann::ordered_json event = stream_chunk_json(header_, text, {token}, nullptr);
      if (header_.top_logprobs >= 0)
        event["choices"][0]["logprobs"] = logprobs_json(header_.chat, *server_.pieces, c.prev, &token, 1,
                                                        now.logprobs.data() + k * now.per_token, now.per_token,
                                                        &c.text_offset);
      c.prev = token;
      if (!write(sink, std::move(event), i)) return false;
      ++c.sent;
    }
    return true;
  }

  // Choice i has ended: writes its tool calls' event (if any) and makes its last event, with its
  // finish_reason, into *last.
  bool finish_choice(httplib::DataSink& sink, size_t i, nlohmann::ordered_json* last) {
    ChoiceStream& c = choices_[i];
    c.done = true;
    std::string rest = c.text.finish();
    const char* finish = c.text.stopped() || now_[i].reason == FinishReason::stop ? "stop" : "length";
    if (c.tool_calls) {  // the calls in an event of their own, before the last
      ToolCallStream::Ending end = c.tool_calls->finish(rest, finish);
      rest = end.content;
      finish = end.finish_reason;
      if (!end.tool_calls.empty()) {
        nlohmann::ordered_json calls = stream_chunk_json(header_, std::exchange(rest, ""), {}, nullptr);
        put_tool_call_deltas(calls, end.tool_calls);
        if (!write(sink, std::move(calls), i)) return false;
      }
    }
    *last = stream_chunk_json(header_, rest, {}, finish);
    (*last)["choices"][0]["index"] = i;
    return true;
  }

  // The last choice's last event with the usage: the prompt once, every choice's tokens, what its
  // least-cached choice found cached. As OpenAI's API, with include_usage every event before has
  // usage null and the last has no choices, only usage; without, the usage is in the last event.
  std::string closing_events(nlohmann::ordered_json last) const {
    int64_t generated = 0, cached = static_cast<int64_t>(prompt_.size());
    for (size_t i = 0; i < choices_.size(); ++i) {
      generated += static_cast<int64_t>(choices_[i].sent);
      cached = std::min(cached, now_[i].cached_tokens);
    }
    const nlohmann::ordered_json usage = usage_json(static_cast<int64_t>(prompt_.size()), generated, cached);
    if (!header_.include_usage) {
      last["usage"] = usage;
      return sse_event(last);
    }
    nlohmann::ordered_json usage_only = stream_chunk_json(header_, "", {}, nullptr);
    usage_only["choices"] = nlohmann::ordered_json::array();
    usage_only["usage"] = usage;
    return sse_event(last) + sse_event(usage_only);
  }

  Impl& server_;
  const CompletionHeader header_;
  const std::shared_ptr<Channel> channel_;
  const std::vector<uint64_t> ids_;  // the scheduler's id of each choice
  const std::vector<int32_t> prompt_;
  const std::shared_ptr<InFlight> flight_;  // counts the stream while it lives
  const int socket_;
  std::vector<ChoiceStream> choices_;
  std::vector<Choice> now_ = std::vector<Choice>(ids_.size());  // each choice's tokens not yet sent, and how it stands
};

void ServeHttp::Impl::answer_stream(Response& res, const CompletionHeader& header,
                                    const std::shared_ptr<Channel>& channel, const std::vector<uint64_t>& ids,
                                    const std::vector<int32_t>& prompt, std::vector<std::string> stops,
                                    std::shared_ptr<InFlight> flight, bool http11) {
  auto stream = std::make_shared<EventStream>(*this, header, channel, ids, prompt, stops, std::move(flight));
  res.set_header("Cache-Control", "no-cache");
  httplib::ContentProviderWithoutLength provider = [stream](size_t, httplib::DataSink& sink) {
    return stream->step(sink);
  };
  // note: chunked transfer coding is HTTP/1.1's; an HTTP/1.0 client's stream ends where its
  // connection does (RFC 9112, 6.3).
  if (http11) {
    res.set_chunked_content_provider("text/event-stream", std::move(provider));
  } else {
    ConnectionServer::close_after_response(res);
    res.set_content_provider("text/event-stream", std::move(provider));
  }
}


void ServeHttp::Impl::routes() {
  server.set_head_check([this](const RequestHead& head) { return refused_head(options.access, head); });
  server.set_pre_routing_handler([this](const Request& req, Response& res) {
    const Route* route = find_route(req.path);
    // (The key, Host and Origin were checked on the head: refused_head.)
    const std::string origin = req.get_header_value("Origin");
    if (cors_allowed(options.access, origin)) set_cors_headers(res, origin);
    const bool answered = answer_preflight(options.access, req, res, route) || refuse_route(req, res, route) ||
                          refuse_content_type(req, res);
    return answered ? httplib::Server::HandlerResponse::Handled : httplib::Server::HandlerResponse::Unhandled;
  });
  server.Post("/v1/completions", [this](const Request& req, Response& res, const httplib::ContentReader& read) {
    completions(req.get_header_value("Authorization"), res, read, req.version == "HTTP/1.1", false);
  });
  server.Post("/v1/chat/completions", [this](const Request& req, Response& res, const httplib::ContentReader& read) {
    completions(req.get_header_value("Authorization"), res, read, req.version == "HTTP/1.1", true);
  });
  server.Post("/tokenize", [this](const Request&, Response& res, const httplib::ContentReader& read) {
    answer_body(res, read,
                [this](const std::string& body) { return answer_tokenize(body, tokenizer, options.limits); });
  });
  server.Post("/detokenize", [this](const Request&, Response& res, const httplib::ContentReader& read) {
    answer_body(res, read,
                [this](const std::string& body) { return answer_detokenize(body, tokenizer, options.limits); });
  });
  server.Get("/health", [this](const Request&, Response& res) {
    if (draining) send_json(res, 503, R"({"status":"shutting down"})");
    else send_json(res, 200, R"({"status":"ok"})");
  });
  server.Get("/v1/models", [this](const Request&, Response& res) {
    json model = {{"id", options.model_name}, {"object", "model"},        {"created", started},
                  {"owned_by", "minfer"},     {"max_model_len", scheduler.n_ctx()},
                  {"vocab_size", info.vocab_size}, {"bos_id", info.bos_id},
                  {"max_prompt_tokens", options.limits.max_prompt_tokens},
                  {"max_tokens_limit", options.limits.max_tokens_limit}};
    send_json(res, 200, dump_json(json{{"object", "list"}, {"data", json::array({model})}}));
  });
  server.Get("/metrics", [this](const Request&, Response& res) {
    res.set_content(prometheus_metrics(scheduler.metrics(), finished_counts(), scheduler.options().slots) +
                        (outputs ? outputs->metrics_text() : std::string()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  // Answers httplib makes itself (a malformed request line, a body it could not read) get the
  // same JSON error as the rest.
  server.set_error_handler(httplib::Server::HandlerWithResponse([](const Request&, Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ConnectionServer::close_after_response(res);
    send_error(res, {res.status, default_message(res.status), "", ""});
    return httplib::Server::HandlerResponse::Handled;
  }));
  server.set_exception_handler([](const Request&, Response& res, std::exception_ptr thrown) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(thrown);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    ConnectionServer::close_after_response(res);
    send_error(res, {500, one_line(what, 400), "", ""});
  });
  // An answer that ends its connection says so once, without httplib's Keep-Alive beside it.
  server.set_post_routing_handler([](const Request&, Response& res) {
    if (res.get_header_value("Connection") != "close") return;
    res.headers.erase("Connection");
    res.headers.erase("Keep-Alive");
    res.set_header("Connection", "close");
  });
  server.set_payload_max_length(static_cast<size_t>(options.max_body_bytes));
  server.set_keep_alive_max_count(100);
}

ServeHttp::ServeHttp(Scheduler& scheduler, const ModelInfo& info, const TextTokenizer* tokenizer,
                     ServeHttpOptions options)
    : impl_(std::make_unique<Impl>(scheduler, info, tokenizer, std::move(options))) {
  impl_->routes();
}

ServeHttp::~ServeHttp() = default;

int ServeHttp::bind() { return impl_->server.bind(impl_->options.host, impl_->options.port); }
bool ServeHttp::listen() {
  const bool ok = impl_->server.listen_after_bind();
  impl_->listen_returned = true;
  return ok;
}

void ServeHttp::drain() {
  impl_->draining = true;
  impl_->server.close_kept_alive();
}

void ServeHttp::stop_reading() {
  impl_->cancelling = true;
  impl_->server.stop_reading();
}

void ServeHttp::stop() {
  // httplib's stop() does nothing before listen() has started: wait for it to start (or fail).
  while (!impl_->server.is_running() && !impl_->listen_returned)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  impl_->server.stop();
  // Connections still open have kAbortAfter to write what they were writing; then every one ends,
  // whatever its client does, and listen() returns.
  const auto abort_at = std::chrono::steady_clock::now() + kAbortAfter;
  while (!impl_->listen_returned && std::chrono::steady_clock::now() < abort_at)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  impl_->server.abort_connections();
}

void ServeHttp::engine_failed(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(impl_->failure_mutex);
    impl_->failure = message;
  }
  impl_->engine_down = true;
}

int64_t ServeHttp::in_flight() const { return impl_->in_flight; }

std::string ServeHttp::chat_template_name() const { return impl_->chat ? impl_->chat->chat_template().name() : ""; }
std::string ServeHttp::chat_refusal() const { return impl_->chat_refusal; }

FinishCounts ServeHttp::finished() const { return impl_->finished_counts(); }

}  // namespace minfer::serve

#endif  // MINFER_HAVE_HTTPLIB
