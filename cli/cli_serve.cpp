// `minfer serve`: a model behind an OpenAI-style HTTP API (serve/serve_http.h), its requests
// batched continuously by the scheduler (engine/scheduler.h).
//
// Threads: this one starts the others and then waits for a reason to stop; the engine's runs
// Scheduler::run; httplib's acceptor and one per connection serve HTTP; a signal-watching thread
// takes SIGINT, SIGTERM and SIGHUP.
//
// Signals: SIGINT, SIGTERM and SIGHUP (a closed terminal, taken as the other two) are blocked in
// every thread (before the first thread starts, so that each inherits the mask) and taken by
// sigtimedwait on the watching thread, never in a handler. Until the server listens, a signal ends the process as it ends minfer's other
// commands (re-raised, so that core/files.h's cleanup handler runs; serve writes no files).
// Once serving, the first signal drains: /health and new completions answer 503, the requests
// in flight have --shutdown-grace seconds to finish, what is left is cancelled (2 s to end), the
// listening socket closes, connections still open are cut 2 s later whatever their clients do,
// and the process exits 0 with a line of counts. A second signal ends the grace
// period at once.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "engine/scheduler.h"
#include "cli/cli_common.h"
#include "cli/cli_ranks.h"
#include "cli/commands.h"
#include "serve/serve_http.h"

namespace minfer::cli {

using namespace minfer::serve;  // the server's library (serve/)

#if MINFER_HAVE_HTTPLIB
namespace {

using Clock = std::chrono::steady_clock;

// What can end serving, as the threads report it to the main thread.
class ServeEvents {
 public:
  void signal() { update([&] { ++signals_; }); }
  void engine_failed(const std::string& message) {
    update([&] { engine_error_ = message.empty() ? "unknown error" : message; });
  }
  void listener_ended() { update([&] { listener_ended_ = true; }); }

  int signals() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return signals_;
  }
  std::string engine_error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return engine_error_;
  }
  bool listener_failed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return listener_ended_;
  }
  // Waits until done(signals, engine failed, listener ended) holds, checked at every event.
  template <class Done>
  void wait(Done done) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return done(signals_, !engine_error_.empty(), listener_ended_); });
  }
  // The same, for at most `timeout`; returns whether done(...) holds.
  template <class Done>
  bool wait_for(Done done, Clock::duration timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return done(signals_, !engine_error_.empty(), listener_ended_); });
  }

 private:
  template <class F>
  void update(F f) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      f();
    }
    changed_.notify_all();
  }
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int signals_ = 0;
  std::string engine_error_;
  bool listener_ended_ = false;
};

// The signal-watching thread. Made before any other thread, so that all of them block the signals.
class SignalWatch {
 public:
  explicit SignalWatch(ServeEvents& events) : events_(events) {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    sigaddset(&signals_, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
    thread_ = std::thread([this] { watch(); });
  }
  ~SignalWatch() {
    done_ = true;
    thread_.join();
  }
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;
  void serving() { serving_ = true; }

 private:
  void watch() {
    const timespec tick{0, 100 * 1000 * 1000};
    while (!done_) {
      const int sig = sigtimedwait(&signals_, nullptr, &tick);
      if (sig < 0) continue;  // the tick passed (EAGAIN), or EINTR
      if (serving_) {
        events_.signal();
        continue;
      }
      // Not serving yet (loading the model): end as the other commands end.
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, sig);
      pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
      raise(sig);
    }
  }
  ServeEvents& events_;
  sigset_t signals_;
  std::atomic<bool> serving_{false}, done_{false};
  std::thread thread_;
};

// "model.gguf" for -m /models/model.gguf, "SmolLM2-135M" for -m SmolLM2-135M/, presets as given.
std::string model_name(std::string spec) {
  while (spec.size() > 1 && spec.back() == '/') spec.pop_back();
  const size_t slash = spec.rfind('/');
  return slash == std::string::npos ? spec : spec.substr(slash + 1);
}

constexpr int64_t kSpareConnections = 32;
// After the grace period, how long the cancelled requests have to end before the connections
// still open are cut (ServeHttp::stop gives those 2 s more to finish writing).
constexpr auto kCancelWait = std::chrono::seconds(2);

// What the options ask for, checked before the model loads; the limits that default to the
// context (set_context) come after it.
struct ServeConfig {
  ServeHttpOptions http;
  SchedulerOptions scheduler;
  double grace = 0.0;  // --shutdown-grace
};

ServeHttpOptions http_options(const Args& args) {
  ServeHttpOptions http;
  http.host = args.get("--host", "127.0.0.1");
  MINFER_CHECK(!http.host.empty(), "--host: empty address");
  http.port = static_cast<int>(args.get_int("--port", 8080, 0, 65535));
  http.max_body_bytes = args.get_int("--max-body-bytes", 1 << 20, 64, 1 << 30);
  http.head_timeout_ms = static_cast<int>(1000 * args.get_double("--header-timeout", 10.0, 0.1, 3600.0));
  http.body_timeout_ms = static_cast<int>(1000 * args.get_double("--body-timeout", 30.0, 0.1, 3600.0));
  http.model_name = model_name(args.get("-m"));
  http.chat_template = args.get("--chat-template", "");
  MINFER_CHECK(!(args.has("--api-key") && args.has("--api-key-file")),
               "--api-key and --api-key-file: one or the other");
  std::vector<std::string> api_keys;
  if (args.has("--api-key-file")) api_keys = read_api_key_file(args.get("--api-key-file"));
  if (args.has("--api-key")) api_keys = {args.get("--api-key")};
  MINFER_CHECK(!args.has("--api-key") || !api_keys[0].empty(), "--api-key: empty key");
  http.access = make_access_options(http.host, std::move(api_keys), args.get("--allowed-hosts", ""),
                                    args.get("--allowed-origins", ""));
  return http;
}

ServeConfig serve_config(const Args& args) {
  MINFER_CHECK(args.has("-m"), "-m MODEL is required (a model file or folder, or preset:NAME)");
  ServeConfig config;
  config.http = http_options(args);
  SchedulerOptions& scheduler = config.scheduler;
  scheduler.slots = args.get_int("--slots", 8, 1, 4096);
  scheduler.pass_rows = args.get_int("--step-tokens", 256, 1, 1 << 20);
  MINFER_CHECK(scheduler.pass_rows >= scheduler.slots, "--step-tokens (", scheduler.pass_rows,
               ") must be at least --slots (", scheduler.slots, "): every slot decodes a row each step");
  scheduler.max_queue = args.get_int("--max-queue", 256, 1, 1 << 20);
  // note: every request in a slot or in the queue holds a connection; beyond those, kSpareConnections
  // for /health, /metrics and clients between requests. Refusing at the socket before the queue is
  // full would answer 503 where a request could have waited (and 429 is the answer when it is full).
  config.http.max_connections =
      args.get_int("--max-connections", scheduler.slots + scheduler.max_queue + kSpareConnections, 1, 1 << 16);
  // One client (a peer address) may hold all but a quarter of them, and at most kSpareConnections
  // fewer: with the default, every slot and the whole queue, and the spare connections are kept
  // for the others.
  const int64_t max_connections = config.http.max_connections;
  config.http.max_connections_per_client =
      args.get_int("--max-connections-per-client",
                   max_connections - std::min<int64_t>(kSpareConnections, max_connections / 4), 1, max_connections);
  scheduler.kv_dtype = kv_dtype_option(args);
  scheduler.prompt_cache = !args.has("--no-prompt-cache");
  config.grace = args.get_double("--shutdown-grace", 5.0, 0.0, 3600.0);
  return config;
}

Engine load_serve_engine(const Args& args) {
  const std::string spec = args.get("-m");
  LlamaOptions llama = llama_options(args);
  // A preset is a shape, not a trained model: --ctx may ask it for a longer context (as bench-serve does).
  if (spec.rfind("preset:", 0) == 0 && args.has("--ctx"))
    llama.preset_ctx = std::max(find_preset(spec.substr(7)).config.n_ctx, args.get_int("--ctx", 0, 1, 1 << 20));
  return load_engine(args, spec, llama);
}

void set_context(const Args& args, const ModelInfo& info, ServeConfig* config) {
  // note: the default context per slot is the model's, up to 4096 positions: S slots of a
  // 128k-context model would ask for a KV cache no machine has.
  const int64_t n_ctx =
      args.has("--ctx") ? args.get_int("--ctx", 0, 1, info.n_ctx) : std::min<int64_t>(info.n_ctx, 4096);
  config->scheduler.n_ctx = n_ctx;
  config->http.limits.max_prompt_tokens = args.get_int("--max-prompt-tokens", n_ctx, 1, n_ctx);
  config->http.limits.max_tokens_limit = args.get_int("--max-tokens-limit", n_ctx, 1, n_ctx);
}

// Joins the threads on every way out, in order: no new connections, then the engine.
struct Joiner {
  ServeHttp& http;
  Scheduler& scheduler;
  std::atomic<bool>& engine_stop;
  std::thread &listener, &engine_thread;
  ~Joiner() {
    scheduler.cancel_all();
    http.stop();
    listener.join();
    engine_stop = true;
    scheduler.notify();
    engine_thread.join();
  }
};

// The grace period: the requests in flight may finish, unless serving failed or a second signal came.
void wait_for_requests(ServeHttp& http, ServeEvents& events, double grace, bool failed) {
  const auto grace_end =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace));
  if (failed) return;
  // (The requests in flight are counted, not signalled: they are looked at every 20 ms.)
  while (http.in_flight() > 0 && Clock::now() < grace_end)
    if (events.wait_for([](int n_signals, bool, bool) { return n_signals > 1; }, std::chrono::milliseconds(20))) return;
}

// What is left is cancelled, again while handlers that were still parsing submit; a body still
// arriving is not waited for.
void cancel_requests(ServeHttp& http, Scheduler& scheduler) {
  http.stop_reading();
  const auto cancel_end = Clock::now() + kCancelWait;
  while (http.in_flight() > 0 && Clock::now() < cancel_end) {
    scheduler.cancel_all();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// After the first signal (or a failure): drains, then throws if serving failed, else prints the counts.
void shut_down(ServeHttp& http, Scheduler& scheduler, ServeEvents& events, double grace) {
  const bool failed = !events.engine_error().empty() || (events.listener_failed() && events.signals() == 0);
  if (!failed)
    std::fprintf(stderr, "minfer: shutting down: %lld requests in flight, %g s to finish\n",
                 static_cast<long long>(http.in_flight()), grace);
  http.drain();
  wait_for_requests(http, events, grace, failed);
  cancel_requests(http, scheduler);
  if (!events.engine_error().empty()) fail("the engine stopped: ", events.engine_error());
  if (failed) fail("the HTTP server stopped: its listening socket failed");
  const FinishCounts finished = http.finished();
  std::fprintf(stderr, "minfer: shut down; requests finished: %llu, cancelled: %llu\n",
               static_cast<unsigned long long>(finished.stop + finished.length),
               static_cast<unsigned long long>(finished.cancelled));
}

// Starts the engine's and the listener's threads, serves until a signal or a failure, and shuts down.
void run_server(ServeHttp& http, Scheduler& scheduler, Backend& backend, ServeEvents& events, SignalWatch& signals,
                const std::string& host, double grace) {
  const int port = http.bind();
  std::atomic<bool> engine_stop{false};
  std::thread engine_thread([&] {
    try {
      use_on_this_thread(backend);  // (a GPU is current per thread)
      scheduler.run(engine_stop);
    } catch (const std::exception& e) {
      http.engine_failed(e.what());
      events.engine_failed(e.what());
    }
  });
  std::thread listener([&] {
    http.listen();
    events.listener_ended();
  });
  Joiner joiner{http, scheduler, engine_stop, listener, engine_thread};

  std::fprintf(stderr, "minfer: listening on http://%s:%d\n",
               (host.find(':') != std::string::npos ? "[" + host + "]" : host).c_str(), port);
  std::fflush(stderr);
  signals.serving();

  events.wait([](int n_signals, bool engine_error, bool listener_ended) {
    return n_signals > 0 || engine_error || listener_ended;
  });
  shut_down(http, scheduler, events, grace);
}

int serve(const Args& args) {
  ServeConfig config = serve_config(args);
  ServeEvents events;
  SignalWatch signals(events);  // before the backend's threads start
  std::unique_ptr<TextTokenizer> tokenizer = command_tokenizer(args, args.get("-m"));
  Engine engine = load_serve_engine(args);
  const ModelInfo& info = engine.model->info();
  if (tokenizer) check_tokenizer_fits(*tokenizer, info, args.has("-z") ? args.get("-z") : args.get("-m"));
  set_context(args, info, &config);
  kv_cache_mib_option(args, info, *engine.backend, &config.scheduler);
  Scheduler scheduler(*engine.model, config.scheduler);
  if (follow_rank_0(scheduler.decoder())) return 0;
  const KvCache& cache = scheduler.decoder().cache();
  std::fprintf(stderr,
               "minfer: KV cache %s (%s, %lld blocks of %lld positions: %.1f contexts of %lld), %lld slots, %s\n",
               format_bytes(cache.bytes()).c_str(), dtype_name(cache.dtype()),
               static_cast<long long>(cache.n_blocks()), static_cast<long long>(cache.block_size()),
               double(cache.n_blocks() * cache.block_size()) / double(scheduler.n_ctx()),
               static_cast<long long>(scheduler.n_ctx()), static_cast<long long>(config.scheduler.slots),
               tokenizer ? tokenizer->describe().c_str() : "no tokenizer: prompts as token ids only");

  ServeHttp http(scheduler, info, tokenizer.get(), config.http);
  if (http.chat_template_name().empty())
    std::fprintf(stderr, "minfer: /v1/chat/completions answers 400: %s\n", http.chat_refusal().c_str());
  else
    std::fprintf(stderr, "minfer: chat template %s; prompt caching %s\n", http.chat_template_name().c_str(),
                 config.scheduler.prompt_cache ? "on" : "off (--no-prompt-cache)");
  run_server(http, scheduler, *engine.backend, events, signals, config.http.host, config.grace);
  scheduler.decoder().end_following();
  return 0;
}

}  // namespace
#endif  // MINFER_HAVE_HTTPLIB

int cmd_serve(int argc, char** argv) {
  std::vector<Option> options = engine_options();
  options.insert(options.end(), {
      {"-z,--tokenizer", "PATH", "a tokenizer.json, GGUF or llama2.c tokenizer.bin (default: the model's own)"},
      {"--host", "ADDR", "the address to listen on (default 127.0.0.1: this machine only)"},
      {"--port", "N", "the port (default 8080; 0: a free port, printed)"},
      {"--slots", "N", "requests decoded together at most (default 8)"},
      {"--ctx", "N", "positions a request may reach (default: the model's context, at most 4096)"},
      {"--kv-cache-mib", "N", "the KV cache's size: a pool of blocks of 64 positions (or --ctx, if shorter)\n"
                              "                              that requests take as they grow (default: slots x ctx positions)"},
      {"--step-tokens", "N", "rows per forward pass at most: decode rows plus prompt chunks (default 256)"},
      {"--max-queue", "N", "requests waiting for a slot at most; more are answered 429 (default 256)"},
      {"--max-body-bytes", "N", "the largest request body (default 1048576)"},
      {"--max-prompt-tokens", "N", "the longest prompt (default: the context)"},
      {"--max-tokens-limit", "N", "the largest max_tokens a request may ask for (default: the context)"},
      {"--max-connections", "N", "open connections at most (default: slots + max-queue + 32); when all are open, a\n"
                                 "                              new one takes the place of the oldest that has sent no whole request head or\n"
                                 "                              is idle, else it is answered 503"},
      {"--max-connections-per-client", "N",
       "open connections from one address at most: one more takes the place of its oldest\n"
       "                              that has sent no whole request head or is idle, else is answered 503\n"
       "                              (default: max-connections less a quarter of it, at most 32 less)"},
      {"--api-key", "KEY", "every route but /health wants Authorization: Bearer KEY, else 401 (default: none)"},
      {"--api-key-file", "PATH", "keys, one a line ('#' lines and blank ones skipped), each accepted as --api-key's\n"
                                 "                              (kept out of the process list)"},
      {"--allowed-hosts", "LIST", "Host names served, comma-separated, * any (default: on a loopback address only\n"
                                  "                              localhost, 127.0.0.1 and [::1], else any); others get 403"},
      {"--allowed-origins", "LIST", "browser origins served, with CORS headers (e.g. http://localhost:3000), * any\n"
                                    "                              (default: none); a request from another Origin gets 403"},
      {"--header-timeout", "S", "seconds a request's line and headers have to arrive whole, or 408 (default 10)"},
      {"--body-timeout", "S", "seconds its body has to arrive after them, or 408 (default 30)"},
      {"--shutdown-grace", "S", "seconds requests in flight have to finish after SIGINT, SIGTERM or SIGHUP (default 5)"},
      {"--chat-template", "NAME", "the chat template of /v1/chat/completions: chatml, llama2, llama3, mistral,\n"
                                  "                              zephyr, gemma or phi3 (default: the model's own)"},
      {"--no-prompt-cache", "", "prefill every prompt whole, instead of reusing the cached blocks of the prefix\n"
                                "                              it shares with earlier requests of its API key and cache_salt (a system prompt,\n"
                                "                              a conversation's history)"},
  });
  Args args("serve",
            "Serves a model over HTTP: OpenAI's completions and chat API (POST /v1/completions,\n"
            "/v1/chat/completions), with continuous batching and prompt caching; GET /v1/models,\n"
            "/health and /metrics (Prometheus); POST /tokenize and /detokenize (llama-server's).",
            options);
  args.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::printf("%s", args.usage().c_str());
    return 0;
  }
#if MINFER_HAVE_HTTPLIB
  return serve(args);
#else
  fail("this minfer was built without cpp-httplib (apt-get install libcpp-httplib-dev)");
#endif
}

}  // namespace minfer::cli
