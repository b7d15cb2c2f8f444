#include "tools/serve_client.h"

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

#include "core/error.h"

#if MINFER_HAVE_HTTPLIB
#include <httplib.h>
#endif

namespace minfer::cli {

#if MINFER_HAVE_HTTPLIB

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A GET that must answer 200; its body.
std::string get_ok(const std::string& url, const std::string& path) {
  httplib::Client client(url);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(10, 0);
  auto res = client.Get(path);
  if (!res) fail(url, path, ": no answer (", httplib::to_string(res.error()), "): is minfer serve running there?");
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

// One streamed completion; fills `stats` with the client's times.
void send_one(const std::string& url, const TraceRequest& r, uint64_t index, RequestStats* stats) {
  httplib::Client client(url);
  client.set_connection_timeout(10, 0);
  client.set_read_timeout(600, 0);
  const nlohmann::json body = {{"prompt", r.prompt}, {"max_tokens", r.max_tokens}, {"temperature", r.temperature},
                               {"seed", r.seed},     {"stream", true},            {"ignore_eos", true}};
  stats->id = index;
  stats->prompt_tokens = static_cast<int64_t>(r.prompt.size());
  stats->submitted = now_seconds();
  std::string pending;  // bytes of an event not complete yet
  bool done = false;
  std::string error;
  httplib::Request request;
  request.method = "POST";
  request.path = "/v1/completions";
  request.body = body.dump();
  request.set_header("Content-Type", "application/json");
  request.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
    pending.append(data, length);
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
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
      const int64_t n = ids != choice.end() && ids->is_array() ? static_cast<int64_t>(ids->size()) : 0;
      if (n > 0) {
        if (stats->completion_tokens == 0) stats->first_token = now_seconds();
        stats->completion_tokens += n;
      }
      const auto reason = choice.find("finish_reason");
      if (reason != choice.end() && reason->is_string())
        stats->reason = *reason == "length" ? FinishReason::length : FinishReason::stop;
    }
    return true;
  };
  httplib::Response response;
  httplib::Error failure = httplib::Error::Success;
  const bool sent = client.send(request, response, failure);
  stats->finished = now_seconds();
  if (!error.empty()) fail(url, ": request ", index, ": ", error);
  if (!sent) fail(url, ": request ", index, " failed: ", httplib::to_string(failure));
  if (response.status != 200)
    fail(url, ": request ", index, " got HTTP ", response.status, ": ", response.body.substr(0, 300));
  if (!done) fail(url, ": request ", index, ": the stream ended without [DONE]");
}

}  // namespace

ServerInfo query_server(const std::string& url) {
  // http://HOST[:PORT], nothing after it: the client adds the paths (no TLS: the server has none).
  const std::string rest = url.rfind("http://", 0) == 0 ? url.substr(7) : "";
  MINFER_CHECK(!rest.empty() && rest.find_first_of("/ ?#@") == std::string::npos, "--url: '", url,
               "' is not http://HOST:PORT");
  const nlohmann::json models = nlohmann::json::parse(get_ok(url, "/v1/models"), nullptr, false);
  if (models.is_discarded() || !models.contains("data") || !models["data"].is_array() || models["data"].empty())
    fail(url, "/v1/models: not a list of models");
  const nlohmann::json& m = models["data"][0];
  auto field = [&](const char* name) -> int64_t {
    if (!m.contains(name) || !m[name].is_number_integer())
      fail(url, "/v1/models does not give the model's ", name, " (bench-serve --url talks to minfer serve)");
    return m[name].get<int64_t>();
  };
  ServerInfo info;
  info.model = m.contains("id") && m["id"].is_string() ? m["id"].get<std::string>() : "?";
  info.n_ctx = field("max_model_len");
  info.vocab_size = field("vocab_size");
  info.bos_id = static_cast<int32_t>(field("bos_id"));
  info.slots = static_cast<int64_t>(metric(get_ok(url, "/metrics"), "minfer_slots"));
  return info;
}

ServeRun replay_http(const std::string& url, const std::vector<TraceRequest>& trace, int connections) {
  MINFER_CHECK(connections >= 1, "--connections must be at least 1");
  ServeRun run;
  run.requests.resize(trace.size());
  std::atomic<size_t> next{0};
  std::mutex mutex;
  std::condition_variable ended;
  bool finished = false;
  std::exception_ptr failure;
  const double start = now_seconds();
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < trace.size();) {
      const double wait = start + trace[i].arrival - now_seconds();
      if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (failure) return;
      }
      try {
        send_one(url, trace[i], i, &run.requests[i]);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!failure) failure = std::current_exception();
        return;
      }
    }
  };
  // Busy slots as the server counts them, from /metrics every 50 ms.
  std::thread poller([&] {
    httplib::Client client(url);
    client.set_connection_timeout(2, 0);
    client.set_read_timeout(5, 0);
    std::unique_lock<std::mutex> lock(mutex);
    while (!finished) {
      lock.unlock();
      auto res = client.Get("/metrics");
      const double busy = res && res->status == 200 ? metric(res->body, "minfer_busy_slots") : -1.0;
      const double t = now_seconds() - start;
      lock.lock();
      if (busy >= 0) run.occupancy.emplace_back(t, static_cast<int64_t>(busy));
      ended.wait_for(lock, std::chrono::milliseconds(50), [&] { return finished; });
    }
  });
  std::vector<std::thread> workers;
  const size_t n_workers = std::min(static_cast<size_t>(connections), trace.size());
  for (size_t c = 0; c < n_workers; ++c) workers.emplace_back(worker);
  for (auto& w : workers) w.join();
  {
    std::lock_guard<std::mutex> lock(mutex);
    finished = true;
  }
  ended.notify_all();
  poller.join();
  if (failure) std::rethrow_exception(failure);
  double last = start;
  for (const RequestStats& r : run.requests) {
    last = std::max(last, r.finished);
    run.prompt_tokens += r.prompt_tokens;
    run.output_tokens += r.completion_tokens;
  }
  run.seconds = last - start;
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

}  // namespace minfer::cli
