#include "serve/serve_client.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/error.h"

#if MINFER_HAVE_HTTPLIB
#include <httplib.h>
#endif

namespace minfer::serve {

#if MINFER_HAVE_HTTPLIB

namespace {

using Clock = std::chrono::steady_clock;

// http://HOST:PORT (HOST a name, an IPv4 address or a bracketed IPv6 one; PORT 1-65535), nothing
// after it: the client adds the paths. No TLS: the server has none.
void check_url(const std::string& url) {
  auto bad = [&] { fail("--url: '", url, "' is not http://HOST:PORT"); };
  if (url.rfind("http://", 0) != 0) bad();
  const std::string rest = url.substr(7);
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) bad();
  const std::string host = rest.substr(0, colon), port = rest.substr(colon + 1);
  if (host.find_first_of("/?#@ ") != std::string::npos) bad();
  if (host.front() == '[' ? host.back() != ']' : host.find(':') != std::string::npos) bad();
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) bad();
  const long n = std::strtol(port.c_str(), nullptr, 10);
  if (n < 1 || n > 65535) bad();
}

// A GET that must answer 200; its body.
std::string get_ok(const std::string& url, const std::string& path) {
  httplib::Client client(url);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(10, 0);
  auto res = client.Get(path);
  if (!res) fail(url, path, ": no answer (", httplib::to_string(res.error()), "): is a server running there?");
  if (res->status != 200) fail(url, path, " answered HTTP ", res->status, ": ", res->body.substr(0, 300));
  return res->body;
}

// The value of the sample `name` (no labels) in Prometheus text, or -1.
double metric(const std::string& text, const std::string& name) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (line.size() > name.size() && line.compare(0, name.size(), name) == 0 && line[name.size()] == ' ')
      return std::strtod(line.c_str() + name.size() + 1, nullptr);
  return -1.0;
}

// Busy slots in /metrics: minfer serve's, or llama-server's requests in progress (with --metrics);
// -1 when neither is there.
double busy_slots(const std::string& metrics) {
  const double minfer = metric(metrics, "minfer_busy_slots");
  return minfer >= 0 ? minfer : metric(metrics, "llamacpp:requests_processing");
}

// A POST of JSON that must answer 200; its body parsed (discarded when it is not JSON).
nlohmann::json post_ok(const std::string& url, const std::string& path, const nlohmann::json& body) {
  httplib::Client client(url);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(10, 0);
  auto res = client.Post(path, body.dump(), "application/json");
  if (!res) fail(url, path, ": no answer (", httplib::to_string(res.error()), ")");
  if (res->status != 200) fail(url, path, " answered HTTP ", res->status, ": ", res->body.substr(0, 300));
  return nlohmann::json::parse(res->body, nullptr, false);
}

// One streamed completion, sent now; fills `stats` with the client's times. The request counts
// from `due`, its arrival time in the trace, so that a wait for a free connection is part of its
// time to first token.
void send_one(const std::string& url, const TraceRequest& r, uint64_t index, double due, RequestStats* stats) {
  httplib::Client client(url);
  client.set_connection_timeout(10, 0);
  client.set_read_timeout(600, 0);
  const nlohmann::json body = {{"prompt", r.prompt}, {"max_tokens", r.max_tokens}, {"temperature", r.temperature},
                               {"seed", r.seed},     {"stream", true},            {"ignore_eos", true}};
  stats->id = index;
  stats->prompt_tokens = static_cast<int64_t>(r.prompt.size());
  stats->submitted = due;
  int status = 0;
  std::string pending;  // bytes of an event not complete yet; an error's body when status != 200
  bool done = false;
  int64_t usage_tokens = -1;
  bool ids_listed = false;
  std::string reason, error;
  httplib::Request request;
  request.method = "POST";
  request.path = "/v1/completions";
  request.body = body.dump();
  request.set_header("Content-Type", "application/json");
  request.response_handler = [&](const httplib::Response& response) {
    status = response.status;
    return true;
  };
  request.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
    if (status != 200) {  // an error's JSON body, kept for the message
      pending.append(data, std::min<size_t>(length, 4096 - std::min<size_t>(pending.size(), 4096)));
      return true;
    }
    // Events end with a blank line; lines may end with CR LF.
    for (size_t i = 0; i < length; ++i)
      if (data[i] != '\r') pending.push_back(data[i]);
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      std::istringstream lines(pending.substr(0, end));
      pending.erase(0, end + 2);
      std::string payload;
      for (std::string line; std::getline(lines, line);)
        if (line.rfind("data:", 0) == 0) payload += line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5);
      if (payload.empty()) continue;  // a comment, an id or an event name alone
      if (payload == "[DONE]") {
        done = true;
        continue;
      }
      const nlohmann::json chunk = nlohmann::json::parse(payload, nullptr, false);
      if (chunk.is_discarded() || !chunk.is_object() || !chunk.contains("choices") || !chunk["choices"].is_array() ||
          chunk["choices"].empty()) {
        error = "an event that is not a completion chunk: " + payload.substr(0, 200);
        return false;
      }
      const nlohmann::json& choice = chunk["choices"][0];
      const auto ids = choice.find("token_ids");
      const auto finish = choice.find("finish_reason");
      const bool last = finish != choice.end() && finish->is_string();
      // note: llama-server's chunks carry no ids: each one before the last is a token (its count
      // is checked against usage below); minfer serve's list theirs.
      ids_listed = ids_listed || ids != choice.end();
      const int64_t n = ids != choice.end() && ids->is_array() ? static_cast<int64_t>(ids->size())
                        : !ids_listed && !last                   ? 1
                                                                 : 0;
      if (n > 0) {
        if (stats->completion_tokens == 0) stats->first_token = now_seconds();
        stats->completion_tokens += n;
      }
      if (finish != choice.end() && finish->is_string()) reason = finish->get<std::string>();
      const auto usage = chunk.find("usage");
      if (usage != chunk.end() && usage->is_object() && usage->contains("completion_tokens") &&
          (*usage)["completion_tokens"].is_number_integer())
        usage_tokens = (*usage)["completion_tokens"].get<int64_t>();
    }
    return true;
  };
  httplib::Response response;
  httplib::Error failure = httplib::Error::Success;
  const bool sent = client.send(request, response, failure);
  stats->finished = now_seconds();
  if (!error.empty()) fail(url, ": request ", index, ": ", error);
  if (status != 0 && status != 200) fail(url, ": request ", index, " got HTTP ", status, ": ", pending.substr(0, 300));
  if (!sent) fail(url, ": request ", index, " failed: ", httplib::to_string(failure));
  if (!done) fail(url, ": request ", index, ": the stream ended without [DONE]");
  // A token whose bytes end inside a character comes in llama-server's next chunk: usage counts.
  if (!ids_listed && usage_tokens > stats->completion_tokens) stats->completion_tokens = usage_tokens;
  // With ignore_eos every request runs to its length: anything else is a server's fault.
  if (stats->completion_tokens != r.max_tokens || reason != "length" || usage_tokens != stats->completion_tokens)
    fail(url, ": request ", index, " asked for ", r.max_tokens, " tokens and got ", stats->completion_tokens,
         " (finish_reason '", reason, "', usage ", usage_tokens, ")");
  stats->reason = FinishReason::length;
}

}  // namespace

ServerInfo query_server(const std::string& url) {
  check_url(url);
  const nlohmann::json models = nlohmann::json::parse(get_ok(url, "/v1/models"), nullptr, false);
  if (models.is_discarded() || !models.contains("data") || !models["data"].is_array() || models["data"].empty())
    fail(url, "/v1/models: not a list of models");
  const nlohmann::json& m = models["data"][0];
  ServerInfo info;
  info.model = m.contains("id") && m["id"].is_string() ? m["id"].get<std::string>() : "?";
  auto integer = [&](const nlohmann::json& object, const char* name, const char* where) -> int64_t {
    if (!object.is_object() || !object.contains(name) || !object[name].is_number_integer())
      fail(url, where, " does not give the model's ", name,
           " (bench-serve --url talks to minfer serve and to llama.cpp's llama-server)");
    return object[name].get<int64_t>();
  };
  if (m.contains("meta") && !m.contains("vocab_size")) {
    // llama-server: the vocabulary and a slot's context in the model's meta, the slots in /props,
    // BOS as the tokenizer adds it to an empty text.
    info.n_ctx = integer(m["meta"], "n_ctx", "/v1/models meta");
    info.vocab_size = integer(m["meta"], "n_vocab", "/v1/models meta");
    const nlohmann::json props = nlohmann::json::parse(get_ok(url, "/props"), nullptr, false);
    info.slots = integer(props, "total_slots", "/props");
    const nlohmann::json bos = post_ok(url, "/tokenize", {{"content", ""}, {"add_special", true}});
    info.bos_id = bos.is_object() && bos.contains("tokens") && bos["tokens"].is_array() && !bos["tokens"].empty() &&
                          bos["tokens"][0].is_number_integer()
                      ? bos["tokens"][0].get<int32_t>()
                      : -1;
    info.max_prompt_tokens = info.n_ctx;
    info.max_tokens_limit = info.n_ctx;
    return info;
  }
  info.n_ctx = integer(m, "max_model_len", "/v1/models");
  info.vocab_size = integer(m, "vocab_size", "/v1/models");
  info.bos_id = static_cast<int32_t>(integer(m, "bos_id", "/v1/models"));
  info.max_prompt_tokens = integer(m, "max_prompt_tokens", "/v1/models");
  info.max_tokens_limit = integer(m, "max_tokens_limit", "/v1/models");
  info.slots = static_cast<int64_t>(metric(get_ok(url, "/metrics"), "minfer_slots"));
  return info;
}

ServeRun replay_http(const std::string& url, const std::vector<TraceRequest>& trace, int connections) {
  MINFER_CHECK(connections >= 1, "--connections must be at least 1");
  check_url(url);
  ServeRun run;
  run.requests.resize(trace.size());
  std::atomic<size_t> next{0};
  std::mutex mutex;
  std::condition_variable changed;  // a failure, or the end of the run
  bool finished = false;
  std::exception_ptr failure;
  const Clock::time_point t0 = Clock::now();
  const double start = seconds_of(t0);
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < trace.size();) {
      const auto due = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(trace[i].arrival));
      {
        std::unique_lock<std::mutex> lock(mutex);
        if (changed.wait_until(lock, due, [&] { return failure != nullptr; })) return;
      }
      try {
        send_one(url, trace[i], i, seconds_of(due), &run.requests[i]);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!failure) failure = std::current_exception();
        changed.notify_all();
        return;
      }
    }
  };
  // Busy slots as the server counts them, from /metrics every 50 ms.
  auto poller = [&] {
    httplib::Client client(url);
    client.set_connection_timeout(2, 0);
    client.set_read_timeout(5, 0);
    std::unique_lock<std::mutex> lock(mutex);
    while (!finished) {
      lock.unlock();
      auto res = client.Get("/metrics");
      const double busy = res && res->status == 200 ? busy_slots(res->body) : -1.0;
      const double t = now_seconds() - start;
      lock.lock();
      if (busy >= 0) run.occupancy.emplace_back(t, static_cast<int64_t>(busy));
      changed.wait_for(lock, std::chrono::milliseconds(50), [&] { return finished; });
    }
  };
  std::vector<std::thread> threads;
  auto stop_and_join = [&] {
    {
      std::lock_guard<std::mutex> lock(mutex);
      finished = true;
      if (!failure) failure = std::current_exception();
    }
    changed.notify_all();
    for (auto& t : threads)
      if (t.joinable()) t.join();
  };
  try {
    threads.emplace_back(poller);
    const size_t n_workers = std::min(static_cast<size_t>(connections), trace.size());
    for (size_t c = 0; c < n_workers; ++c) threads.emplace_back(worker);
  } catch (...) {  // a thread that could not start: stop the others before saying so
    stop_and_join();
    throw;
  }
  for (size_t t = 1; t < threads.size(); ++t) threads[t].join();
  {
    std::lock_guard<std::mutex> lock(mutex);
    finished = true;
  }
  changed.notify_all();
  threads[0].join();
  if (failure) std::rethrow_exception(failure);
  finish_run(run, start, trace);
  return run;
}

#else

ServerInfo query_server(const std::string&) {
  fail("this minfer was built without cpp-httplib (apt-get install libcpp-httplib-dev), so bench-serve --url cannot "
       "send requests");
}

ServeRun replay_http(const std::string&, const std::vector<TraceRequest>&, int) {
  fail("this minfer was built without cpp-httplib (apt-get install libcpp-httplib-dev), so bench-serve --url cannot "
       "send requests");
}

#endif

}  // namespace minfer::serve
