// demo continuous: the batching lesson as servers live it. Requests arrive with prompts and
// outputs of different lengths (a seeded trace, engine/serve_trace.h: lengths log-uniform, so many
// short and a few long). Static batches of B run B requests until the longest ends: the rows of the
// finished ones go on being computed for nothing, and the next requests wait. Continuous batching
// (engine/scheduler.h) gives a finished request's slot to the next one at the very next step, its
// prompt fed in chunks beside the decode rows. Same model, same trace, same B: tokens per second,
// the slots doing useful work over time, and the latency percentiles of both.
#include <algorithm>

#include "engine/serve_trace.h"
#include "lessons/demos.h"
#include "models/llama.h"

namespace minfer::demo {

namespace {

struct Policy {
  std::string name;
  SchedulerOptions::Policy policy;
  int64_t step_tokens;
};

void run_half(Report& r, const std::string& half, Backend& backend, const std::string& spec, DType dtype,
              int64_t slots, const TraceOptions& trace_options) {
  LlamaOptions lo;
  lo.dtype = dtype;
  const int64_t needed = trace_options.prompt_max + trace_options.output_max - 1;
  if (spec.rfind("preset:", 0) == 0) lo.preset_ctx = std::max(needed, find_preset(spec.substr(7)).config.n_ctx);
  auto model = LlamaModel::load(spec, backend, lo);
  const std::vector<TraceRequest> trace = make_trace(trace_options, model->info().vocab_size, model->info().bos_id);
  // note: a static batch prefills all of its prompts before it decodes (as `generate --batch`
  // does), so its budget is the whole batch's prompts. Continuous batching is run twice: with steps
  // of as many rows as there are slots (prompt rows only fill what decode rows leave, so no step is
  // longer than a static batch's decode step) and with room for 64 more prompt rows per step
  // (prompts reach their first token sooner, decode steps get longer while they do).
  const std::string b = std::to_string(slots);
  const std::vector<Policy> policies = {
      {"static batches of " + b, SchedulerOptions::Policy::static_batches, slots * trace_options.prompt_max},
      {"continuous, " + b + " slots, " + b + " rows a step", SchedulerOptions::Policy::continuous, slots},
      {"continuous, " + b + " slots, " + std::to_string(slots + 64) + " rows a step",
       SchedulerOptions::Policy::continuous, slots + 64}};
  std::vector<std::vector<std::string>> rows;
  std::vector<ServeRun> runs;
  for (const Policy& p : policies) {
    SchedulerOptions so;
    so.slots = slots;
    so.n_ctx = needed;
    so.step_tokens = p.step_tokens;
    so.max_queue = trace_options.n_requests;
    so.policy = p.policy;
    Scheduler scheduler(*model, so);
    runs.push_back(replay(scheduler, trace));
    const ServeRun& run = runs.back();
    // Busy slots over time, thinned to about 200 points per line.
    const size_t stride = std::max<size_t>(1, run.occupancy.size() / 200);
    for (size_t i = 0; i < run.occupancy.size(); i += stride)
      r.point(half, p.name, run.occupancy[i].first, double(run.occupancy[i].second));
    const LatencySummary ttft = run.ttft(), tpot = run.tpot();
    rows.push_back({p.name, fmt("%.1f", run.output_tokens_per_second()), fmt("%.2f", run.seconds),
                    fmt("%.1f", run.mean_occupancy()), fmt("%.0f", ttft.median * 1e3) + " / " + fmt("%.0f", ttft.p90 * 1e3) +
                        " / " + fmt("%.0f", ttft.p99 * 1e3),
                    fmt("%.1f", tpot.median * 1e3) + " / " + fmt("%.1f", tpot.p90 * 1e3) + " / " + fmt("%.1f", tpot.p99 * 1e3)});
  }
  std::printf("%s: %s (%s weights), %lld requests, prompts %lld-%lld and outputs %lld-%lld tokens (log-uniform), %s\n",
              half.c_str(), spec.c_str(), dtype_name(dtype), static_cast<long long>(trace_options.n_requests),
              static_cast<long long>(trace_options.prompt_min), static_cast<long long>(trace_options.prompt_max),
              static_cast<long long>(trace_options.output_min), static_cast<long long>(trace_options.output_max),
              trace_options.rate > 0 ? fmt("Poisson arrivals at %.1f per second", trace_options.rate).c_str()
                                     : "all arriving at once");
  print_table({"policy", "output tokens/s", "seconds", "mean busy slots", "TTFT ms p50 / p90 / p99",
               "TPOT ms p50 / p90 / p99"},
              rows);
  r.ran(half);
  auto ratio = [](double x, double y) { return y > 0 ? x / y : 0.0; };
  std::string text;
  for (size_t i = 1; i < runs.size(); ++i)
    text += (i > 1 ? "; with " : "with ") + fmt("%.0f rows a step continuous batching delivers ", double(policies[i].step_tokens)) +
            fmt("%.2fx the output tokens per second of static batches", ratio(runs[i].output_tokens_per_second(),
                                                                               runs[0].output_tokens_per_second())) +
            fmt(" (busy slots %.1f", runs[i].mean_occupancy()) + fmt(" against %.1f)", runs[0].mean_occupancy()) +
            fmt(" at %.2fx their median time per output token", ratio(runs[i].tpot().median, runs[0].tpot().median)) +
            fmt(" and %.2fx their median time to first token", ratio(runs[i].ttft().median, runs[0].ttft().median));
  r.conclude(half, text);
}

}  // namespace

void continuous(const Options& o) {
  Report r("continuous", "static batches against continuous batching on one trace: busy slots over time");
  TraceOptions t;
  // Story-model traffic: short openings (4-64 tokens) and stories of 8-256 tokens.
  t.n_requests = o.quick ? 24 : 200;
  t.prompt_min = 4;
  t.prompt_max = o.quick ? 32 : 64;
  t.output_min = 8;
  t.output_max = o.quick ? 64 : 256;
  auto cpu = cpu_backend(o);
  run_half(r, "cpu", *cpu, o.model_or(o.quick ? "preset:tiny" : "preset:stories15M"), DType::f32, 16, t);
  if (!o.cuda) {
    r.skipped("cuda", "no CUDA device (" + o.cuda_reason + ")");
  } else {
    auto gpu = cuda_backend();
    TraceOptions g = t;
    g.n_requests = o.quick ? 64 : 512;
    run_half(r, "cuda", *gpu, o.model_or("preset:llama-1b"), DType::f16, 64, g);
  }
  r.axes("seconds since the first request", "slots doing useful work", false, false);
  r.write(o.out_dir);
}

}  // namespace minfer::demo
