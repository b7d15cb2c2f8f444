// Synthetic serving traffic and its replay: what `minfer bench-serve` and the `continuous` lesson
// measure, in the manner of vLLM's serving benchmark.
//
// A trace is a list of requests with arrival times (a Poisson process: exponential gaps at `rate`
// requests per second; rate 0 sends them all at time 0), prompt lengths and output lengths drawn
// log-uniformly from their ranges (many short, a few long, as real traffic has them) and random
// prompt tokens, all from one seed. Outputs run to their length (stop tokens ignored), so that a
// trace asks for the same work whatever the model says.
//
// Replaying it against a Scheduler in-process submits each request at its arrival time from a
// driver thread while the calling thread steps the scheduler; the result has every request's
// times (time to first token, time per output token), the throughput, and the busy slots over time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/scheduler.h"

namespace minfer {

struct TraceOptions {
  int64_t n_requests = 200;
  double rate = 0.0;  // requests per second; 0: all arrive at once
  int64_t prompt_min = 16, prompt_max = 256;
  int64_t output_min = 8, output_max = 256;
  // Tokens every prompt begins with (a system prompt; BOS first where there is one), before its own prompt tokens.
  int64_t shared_prefix = 0;
  float temperature = 0.0f;
  uint64_t seed = 1;
};

struct TraceRequest {
  double arrival = 0.0;  // seconds after the start
  std::vector<int32_t> prompt;
  int64_t max_tokens = 0;
  float temperature = 0.0f;
  uint64_t seed = 1;
};

// The trace for a model with `vocab` tokens; prompts start with `bos` (when >= 0), then the shared
// prefix, then their own tokens, all drawn from [3, vocab) (past llama2.c's UNK, BOS and EOS). With
// bos < 0 the first token is drawn from a second stream: the lengths and the other tokens are
// those of the same seed with a BOS.
std::vector<TraceRequest> make_trace(const TraceOptions& options, int64_t vocab, int32_t bos);

struct LatencySummary {
  double mean = 0, median = 0, p90 = 0, p99 = 0;
};
// Percentiles interpolated between neighbouring ranks (numpy's default); zeros for no values.
LatencySummary summarize(std::vector<double> values);

struct ServeRun {
  std::vector<RequestStats> requests;  // in trace order
  double seconds = 0.0;                // first arrival to last finish
  int64_t prompt_tokens = 0, output_tokens = 0;
  double output_tokens_per_second() const { return seconds > 0 ? double(output_tokens) / seconds : 0.0; }
  LatencySummary ttft() const;  // seconds
  LatencySummary tpot() const;  // seconds, over requests with at least two tokens
  // Busy slots sampled after every step: (seconds since the start, slots in use).
  std::vector<std::pair<double, int64_t>> occupancy;
  // The KV cache after every step: positions the running requests hold, and blocks held.
  struct KvSample {
    double seconds;
    int64_t positions, blocks;
  };
  std::vector<KvSample> kv;
  double mean_occupancy() const;  // busy slots averaged over time
  int64_t max_occupancy() const;   // the most busy slots after a step
};

// Sums the requests' tokens into `run` and sets its seconds, from the first arrival (`start`, the
// replay's start on now_seconds()'s clock, plus the trace's first arrival time) to the last finish.
void finish_run(ServeRun& run, double start, const std::vector<TraceRequest>& trace);

// Replays `trace` against `scheduler` in this process (see above). The scheduler must be idle.
ServeRun replay(Scheduler& scheduler, const std::vector<TraceRequest>& trace);

}  // namespace minfer
