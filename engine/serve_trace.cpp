#include "engine/serve_trace.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <cmath>
#include <random>
#include <thread>

#include "core/clock.h"
#include "core/error.h"

namespace minfer {

namespace {

// A length in [lo, hi] with log(length) uniform.
int64_t log_uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  std::uniform_real_distribution<double> u(std::log(double(lo)), std::log(double(hi) + 1.0));
  return std::clamp<int64_t>(static_cast<int64_t>(std::exp(u(rng))), lo, hi);
}

}  // namespace

std::vector<TraceRequest> make_trace(const TraceOptions& o, int64_t vocab, int32_t bos) {
  MINFER_CHECK(o.n_requests >= 1, "trace: at least one request");
  MINFER_CHECK(o.rate >= 0.0, "trace: the rate must be >= 0");
  MINFER_CHECK(o.prompt_min >= 1 && o.prompt_min <= o.prompt_max, "trace: prompt lengths ", o.prompt_min, "-",
               o.prompt_max, " are not a range of positive lengths");
  MINFER_CHECK(o.output_min >= 1 && o.output_min <= o.output_max, "trace: output lengths ", o.output_min, "-",
               o.output_max, " are not a range of positive lengths");
  MINFER_CHECK(vocab > 3, "trace: a vocabulary of ", vocab, " tokens");
  MINFER_CHECK(o.shared_prefix >= 0 && o.shared_prefix <= (int64_t(1) << 30), "trace: a shared prefix of ",
               o.shared_prefix, " tokens");
  std::mt19937_64 rng(o.seed);
  std::exponential_distribution<double> gap(o.rate > 0 ? o.rate : 1.0);
  std::uniform_int_distribution<int32_t> token(3, static_cast<int32_t>(vocab - 1));
  // note: a prompt's first token is BOS, or without one a token from a second stream, so that the
  // lengths and every other token are the same whatever `bos` is: llama-server names a BOS only
  // where its tokenizer adds one, minfer serve its model's, and bench-serve --url must ask both for
  // the same work.
  std::mt19937_64 first_tokens(o.seed ^ 0x9e3779b97f4a7c15ull);
  auto first = [&] { return bos >= 0 ? bos : token(first_tokens); };
  std::vector<int32_t> shared;
  if (o.shared_prefix > 0) shared.push_back(first());
  while (static_cast<int64_t>(shared.size()) < o.shared_prefix) shared.push_back(token(rng));
  std::vector<TraceRequest> trace(static_cast<size_t>(o.n_requests));
  double t = 0.0;
  for (int64_t i = 0; i < o.n_requests; ++i) {
    TraceRequest& r = trace[i];
    if (o.rate > 0 && i > 0) t += gap(rng);
    r.arrival = o.rate > 0 ? t : 0.0;
    const int64_t length = o.shared_prefix + log_uniform(rng, o.prompt_min, o.prompt_max);
    r.prompt.reserve(static_cast<size_t>(length));
    r.prompt = shared;
    if (shared.empty()) r.prompt.push_back(first());
    while (static_cast<int64_t>(r.prompt.size()) < length) r.prompt.push_back(token(rng));
    r.max_tokens = log_uniform(rng, o.output_min, o.output_max);
    r.temperature = o.temperature;
    r.seed = o.seed * 1000003 + uint64_t(i);
  }
  return trace;
}

LatencySummary summarize(std::vector<double> v) {
  LatencySummary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double pos = q * double(v.size() - 1);
    const size_t below = static_cast<size_t>(pos);
    const size_t above = std::min(below + 1, v.size() - 1);
    return v[below] + (pos - double(below)) * (v[above] - v[below]);
  };
  for (double x : v) s.mean += x / double(v.size());
  s.median = at(0.5);
  s.p90 = at(0.9);
  s.p99 = at(0.99);
  return s;
}

LatencySummary ServeRun::ttft() const {
  std::vector<double> v;
  for (const auto& r : requests)
    if (r.completion_tokens > 0) v.push_back(r.ttft());
  return summarize(std::move(v));
}

LatencySummary ServeRun::tpot() const {
  std::vector<double> v;
  for (const auto& r : requests)
    if (r.completion_tokens > 1) v.push_back(r.tpot());
  return summarize(std::move(v));
}

double ServeRun::mean_occupancy() const {
  if (occupancy.size() < 2) return occupancy.empty() ? 0.0 : double(occupancy.front().second);
  double area = 0.0;
  for (size_t i = 1; i < occupancy.size(); ++i)
    area += double(occupancy[i].second) * (occupancy[i].first - occupancy[i - 1].first);
  const double span = occupancy.back().first - occupancy.front().first;
  return span > 0 ? area / span : double(occupancy.back().second);
}

int64_t ServeRun::max_occupancy() const {
  int64_t most = 0;
  for (const auto& o : occupancy) most = std::max(most, o.second);
  return most;
}

void finish_run(ServeRun& run, double start, const std::vector<TraceRequest>& trace) {
  double last = start;
  for (const auto& r : run.requests) {
    last = std::max(last, r.finished);
    run.prompt_tokens += r.prompt_tokens;
    run.output_tokens += r.completion_tokens;
  }
  run.seconds = last - start - (trace.empty() ? 0.0 : trace.front().arrival);
}

ServeRun replay(Scheduler& scheduler, const std::vector<TraceRequest>& trace) {
  MINFER_CHECK(scheduler.metrics().busy_slots == 0 && scheduler.metrics().queue_depth == 0,
               "replay: the scheduler is busy");
  ServeRun run;
  run.requests.resize(trace.size());
  std::atomic<size_t> finished{0}, submitted{0};
  std::atomic<bool> driver_done{false};
  std::exception_ptr failure;
  const double start = now_seconds();
  // The driver submits each request at its arrival time; this thread steps the scheduler.
  std::thread driver([&] {
    try {
      for (size_t i = 0; i < trace.size(); ++i) {
        const double wait = start + trace[i].arrival - now_seconds();
        if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
        ServeRequest r;
        r.prompt = trace[i].prompt;
        r.max_tokens = trace[i].max_tokens;
        r.temperature = trace[i].temperature;
        r.seed = trace[i].seed;
        r.stop_at_eos = false;
        r.on_finish = [&, i](const RequestStats& s) {
          run.requests[i] = s;
          finished.fetch_add(1);
        };
        scheduler.submit(std::move(r));
        submitted.fetch_add(1);
      }
    } catch (...) {
      failure = std::current_exception();  // read after join()
    }
    driver_done = true;
  });
  run.occupancy.reserve(trace.size() * 64);
  run.kv.reserve(trace.size() * 64);
  try {
    while (!driver_done.load() || finished.load() < submitted.load()) {
      if (!scheduler.step()) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        continue;
      }
      const SchedulerMetrics m = scheduler.metrics();
      const double t = now_seconds() - start;
      run.occupancy.emplace_back(t, m.busy_slots);
      run.kv.push_back({t, m.kv_positions, m.kv_blocks_used});
    }
  } catch (...) {
    driver.join();  // a failed step ends the replay with its error, not with std::terminate
    throw;
  }
  driver.join();
  if (failure) std::rethrow_exception(failure);
  finish_run(run, start, trace);
  return run;
}

}  // namespace minfer
