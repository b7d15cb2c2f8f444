// demo continuous: the batching lesson as servers live it. Requests arrive with prompts and
// outputs of different lengths (a seeded trace, engine/serve_trace.h: lengths log-uniform, so many
// short and a few long). Static batches of B run B requests until the longest ends: the rows of the
// finished ones go on being computed for nothing, and the next requests wait. Continuous batching
// (engine/scheduler.h) gives a finished request's slot to the next one at the very next step, its
// prompt fed in chunks beside the decode rows. Same model, same trace, same B: tokens per second,
// the slots doing useful work over time, and the latency percentiles of both; on the CPU both
// again with an f16 KV cache. Every figure is a median over rounds that run the policies in turn.
#include <algorithm>
#include <optional>

#include "engine/serve_trace.h"
#include "lessons/demos.h"
#include "model/llama.h"
#include "formats/model_files.h"

namespace minfer::demo {

namespace {

struct Policy {
  std::string name;
  SchedulerOptions::Policy policy;
  int64_t pass_rows;
  std::optional<DType> kv_dtype;  // unset: the device's default cache
};

// One policy's figures, each the median over the rounds.
struct Figures {
  double tokens_per_second, seconds, busy_slots;
  LatencySummary ttft, tpot;
};
Figures medians(const std::vector<ServeRun>& runs) {
  auto over = [&](auto get) {
    std::vector<double> v;
    for (const ServeRun& run : runs) v.push_back(get(run));
    return summarize(v).median;
  };
  Figures f;
  f.tokens_per_second = over([](const ServeRun& r) { return r.output_tokens_per_second(); });
  f.seconds = over([](const ServeRun& r) { return r.seconds; });
  f.busy_slots = over([](const ServeRun& r) { return r.mean_occupancy(); });
  f.ttft.median = over([](const ServeRun& r) { return r.ttft().median; });
  f.ttft.p90 = over([](const ServeRun& r) { return r.ttft().p90; });
  f.ttft.p99 = over([](const ServeRun& r) { return r.ttft().p99; });
  f.tpot.median = over([](const ServeRun& r) { return r.tpot().median; });
  f.tpot.p90 = over([](const ServeRun& r) { return r.tpot().p90; });
  f.tpot.p99 = over([](const ServeRun& r) { return r.tpot().p99; });
  return f;
}

void run_half(Report& r, const std::string& half, Backend& backend, const std::string& spec, DType dtype,
              int64_t slots, const TraceOptions& trace_options, int rounds) {
  LlamaOptions lo;
  lo.dtype = dtype;
  const int64_t needed = trace_options.prompt_max + trace_options.output_max - 1;
  if (spec.rfind("preset:", 0) == 0) lo.preset_ctx = std::max(needed, find_preset(spec.substr(7)).config.n_ctx);
  auto model = load_model(spec, backend, lo);
  const std::vector<TraceRequest> trace = make_trace(trace_options, model->info().vocab_size, model->info().bos_id);
  // note: a static batch prefills all of its prompts before it decodes (as `generate --batch`
  // does), so its budget is the whole batch's prompts. Continuous batching is run twice: with steps
  // of as many rows as there are slots (prompt rows only fill what decode rows leave, so no step is
  // longer than a static batch's decode step) and with room for 64 more prompt rows per step
  // (prompts reach their first token sooner, decode steps get longer while they do). The last two
  // policies repeat the first two with the KV cache in f16, half the bytes per position.
  const std::string b = std::to_string(slots);
  const std::string s16 = "continuous, " + b + " slots, " + b + " rows a step";
  std::vector<Policy> policies = {
      {"static batches of " + b, SchedulerOptions::Policy::static_batches, slots * trace_options.prompt_max, {}},
      {s16, SchedulerOptions::Policy::continuous, slots, {}},
      {"continuous, " + b + " slots, " + std::to_string(slots + 64) + " rows a step",
       SchedulerOptions::Policy::continuous, slots + 64, {}}};
  // An f16 cache is the CUDA default already; on the CPU it is an option worth a row.
  if (backend.device() == DeviceKind::cpu) {
    policies.push_back({policies[0].name + ", f16 KV", SchedulerOptions::Policy::static_batches,
                        policies[0].pass_rows, DType::f16});
    policies.push_back({s16 + ", f16 KV", SchedulerOptions::Policy::continuous, slots, DType::f16});
  }
  // note: rounds of every policy in turn (A B C A B C ...), each figure the median of its rounds, so
  // that a machine whose speed drifts over a minute (shared cores) moves every policy alike.
  std::vector<std::vector<ServeRun>> runs(policies.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < policies.size(); ++i) {
      const Policy& p = policies[i];
      SchedulerOptions so;
      so.slots = slots;
      so.n_ctx = needed;
      so.pass_rows = p.pass_rows;
      so.max_queue = trace_options.n_requests;
      so.policy = p.policy;
      so.kv_dtype = p.kv_dtype;
      Scheduler scheduler(*model, so);
      runs[i].push_back(replay(scheduler, trace));
    }
  }
  std::vector<Figures> figures;
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < policies.size(); ++i) {
    // Busy slots over time in the last round, thinned to about 200 points per line.
    const ServeRun& run = runs[i].back();
    const size_t stride = std::max<size_t>(1, run.occupancy.size() / 200);
    for (size_t k = 0; k < run.occupancy.size(); k += stride)
      r.point(half, policies[i].name, run.occupancy[k].first, double(run.occupancy[k].second));
    const Figures f = medians(runs[i]);
    figures.push_back(f);
    rows.push_back({policies[i].name, fmt("%.1f", f.tokens_per_second), fmt("%.2f", f.seconds),
                    fmt("%.1f", f.busy_slots),
                    fmt("%.0f", f.ttft.median * 1e3) + " / " + fmt("%.0f", f.ttft.p90 * 1e3) + " / " +
                        fmt("%.0f", f.ttft.p99 * 1e3),
                    fmt("%.1f", f.tpot.median * 1e3) + " / " + fmt("%.1f", f.tpot.p90 * 1e3) + " / " +
                        fmt("%.1f", f.tpot.p99 * 1e3)});
  }
  std::printf("%s: %s (%s weights), %lld requests, prompts %lld-%lld and outputs %lld-%lld tokens (log-uniform), %s; "
              "medians of %d interleaved round%s\n",
              half.c_str(), spec.c_str(), dtype_name(dtype), static_cast<long long>(trace_options.n_requests),
              static_cast<long long>(trace_options.prompt_min), static_cast<long long>(trace_options.prompt_max),
              static_cast<long long>(trace_options.output_min), static_cast<long long>(trace_options.output_max),
              trace_options.rate > 0 ? fmt("Poisson arrivals at %.1f per second", trace_options.rate).c_str()
                                     : "all arriving at once",
              rounds, rounds == 1 ? "" : "s");
  print_table({"policy", "output tokens/s", "seconds", "mean busy slots", "TTFT ms p50 / p90 / p99",
               "TPOT ms p50 / p90 / p99"},
              rows);
  r.ran(half);
  // Each continuous policy against the static one with the same cache: every ratio is the median
  // of the ratios within a round (the two runs of a round are seconds apart, the rounds minutes).
  auto ratio = [&](size_t i, size_t base, auto get) {
    std::vector<double> v;
    for (int round = 0; round < rounds; ++round) {
      const double y = get(runs[base][round]);
      v.push_back(y > 0 ? get(runs[i][round]) / y : 0.0);
    }
    return summarize(v).median;
  };
  auto tokens_per_second = [](const ServeRun& run) { return run.output_tokens_per_second(); };
  auto tpot_median = [](const ServeRun& run) { return run.tpot().median; };
  auto ttft_median = [](const ServeRun& run) { return run.ttft().median; };
  std::string text;
  for (size_t i = 1; i < policies.size(); ++i) {
    if (policies[i].policy == SchedulerOptions::Policy::static_batches) continue;
    size_t base = 0;
    for (size_t j = 0; j < policies.size(); ++j)
      if (policies[j].policy == SchedulerOptions::Policy::static_batches && policies[j].kv_dtype == policies[i].kv_dtype)
        base = j;
    text += (text.empty() ? "" : "; ") + policies[i].name + fmt(": %.2fx the output tokens per second of ",
                                                                 ratio(i, base, tokens_per_second)) +
            policies[base].name + fmt(" (busy slots %.1f", figures[i].busy_slots) +
            fmt(" against %.1f)", figures[base].busy_slots) +
            fmt(" at %.2fx their median time per output token", ratio(i, base, tpot_median)) +
            fmt(" and %.2fx their median time to first token", ratio(i, base, ttft_median));
  }
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
  const int rounds = o.quick ? 1 : 3;
  run_half(r, "cpu", *cpu, o.model_or(o.quick ? "preset:tiny" : "preset:stories15M"), DType::f32, 16, t, rounds);
  if (!o.cuda) {
    r.skipped("cuda", "no CUDA device (" + o.cuda_reason + ")");
  } else {
    auto gpu = cuda_backend();
    TraceOptions g = t;
    g.n_requests = o.quick ? 64 : 512;
    run_half(r, "cuda", *gpu, o.model_or("preset:llama-1b"), DType::f16, 64, g, rounds);
  }
  r.axes("seconds since the first request", "slots doing useful work", false, false);
  r.write(o.out_dir);
}

}  // namespace minfer::demo
