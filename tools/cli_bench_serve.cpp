// `minfer bench-serve`: serving throughput and latency on a synthetic trace (engine/serve_trace.h),
// replayed against the scheduler in this process, as vLLM's serving benchmark reports them:
// output tokens per second, time to first token and time per output token (mean, median, p90,
// p99), with continuous batching, static batches, or both on the same trace.
#include <algorithm>
#include <cstdio>
#include <tuple>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "engine/serve_trace.h"
#include "tools/cli_common.h"
#include "tools/commands.h"

namespace minfer::cli {

namespace {

std::pair<int64_t, int64_t> parse_range(const std::string& text, const char* option) {
  const auto dash = text.find('-');
  if (dash == std::string::npos) {
    const int64_t v = parse_int(text, option, 1, 1 << 20);
    return {v, v};
  }
  const int64_t lo = parse_int(text.substr(0, dash), option, 1, 1 << 20);
  const int64_t hi = parse_int(text.substr(dash + 1), option, 1, 1 << 20);
  MINFER_CHECK(lo <= hi, option, ": '", text, "' is not a range LO-HI");
  return {lo, hi};
}

struct PolicyRun {
  std::string policy;
  ServeRun run;
};

nlohmann::ordered_json to_json(const PolicyRun& p, const std::string& model, int64_t slots, const TraceOptions& t) {
  auto summary = [](const LatencySummary& s) {
    return nlohmann::ordered_json{{"mean", s.mean}, {"median", s.median}, {"p90", s.p90}, {"p99", s.p99}};
  };
  nlohmann::ordered_json j;
  j["model"] = model;
  j["policy"] = p.policy;
  j["slots"] = slots;
  j["requests"] = t.n_requests;
  j["rate"] = t.rate;
  j["prompt_len"] = {t.prompt_min, t.prompt_max};
  j["output_len"] = {t.output_min, t.output_max};
  j["seconds"] = p.run.seconds;
  j["prompt_tokens"] = p.run.prompt_tokens;
  j["output_tokens"] = p.run.output_tokens;
  j["output_tokens_per_second"] = p.run.output_tokens_per_second();
  j["mean_busy_slots"] = p.run.mean_occupancy();
  j["ttft_seconds"] = summary(p.run.ttft());
  j["tpot_seconds"] = summary(p.run.tpot());
  j["build_commit"] = build_commit();
  return j;
}

}  // namespace

int cmd_bench_serve(int argc, char** argv) {
  std::vector<Option> options = engine_options();
  options.insert(options.end(), {
      {"--policy", "P", "continuous, static or both (default both): per-step scheduling, or batches that\n"
                        "                              start only when every slot is free"},
      {"--slots", "N", "sequences decoded together (default 16)"},
      {"--step-tokens", "N", "rows per forward pass, decode rows and prompt chunks (default 256)"},
      {"--ctx", "N", "positions per slot (default: the longest prompt + output of the trace); a preset is\n"
                     "                              given this context if its own is shorter"},
      {"--requests", "N", "requests in the trace (default 200)"},
      {"--rate", "R", "arrivals per second, a Poisson process; 0 sends every request at once (default 0)"},
      {"--prompt-len", "LO-HI", "prompt lengths, log-uniform (default 16-256)"},
      {"--output-len", "LO-HI", "output lengths, log-uniform (default 8-256)"},
      {"--temp", "T", "sampling temperature of every request (default 0, greedy)"},
      {"--seed", "S", "the trace's seed (default 1)"},
      {"-o,--output", "FMT", "md or json (default md)"},
      {"--save-json", "PATH", "also write the JSON records to PATH"},
  });
  Args args("bench-serve",
            "Replays a synthetic serving trace against the continuous-batching scheduler in this process and\n"
            "reports output tokens/s, time to first token and time per output token.",
            options);
  args.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::printf("%s", args.usage().c_str());
    return 0;
  }
  const std::string policy = args.get("--policy", "both");
  MINFER_CHECK(policy == "continuous" || policy == "static" || policy == "both", "--policy: '", policy,
               "' is not continuous, static or both");
  const std::string output = args.get("-o", "md");
  MINFER_CHECK(output == "md" || output == "json", "-o: '", output, "' is not md or json");
  if (args.has("--save-json")) check_output_path(args.get("--save-json"), "--save-json");
  TraceOptions trace;
  trace.n_requests = args.get_int("--requests", 200, 1, 1000000);
  trace.rate = args.get_double("--rate", 0.0, 0.0, 1e6);
  std::tie(trace.prompt_min, trace.prompt_max) = parse_range(args.get("--prompt-len", "16-256"), "--prompt-len");
  std::tie(trace.output_min, trace.output_max) = parse_range(args.get("--output-len", "8-256"), "--output-len");
  trace.temperature = static_cast<float>(args.get_double("--temp", 0.0, 0.0, 1e6));
  trace.seed = static_cast<uint64_t>(args.get_int("--seed", 1, 1, INT64_MAX));
  SchedulerOptions so;
  so.slots = args.get_int("--slots", 16, 1, 4096);
  so.step_tokens = args.get_int("--step-tokens", 256, 1, 1 << 20);
  so.max_queue = trace.n_requests;

  // Every request of the trace must fit a slot: the longest prompt plus the longest output.
  const int64_t needed = trace.prompt_max + trace.output_max - 1;
  so.n_ctx = args.has("--ctx") ? args.get_int("--ctx", 0, 1, 1 << 20) : needed;
  MINFER_CHECK(so.n_ctx >= needed, "--ctx ", so.n_ctx, ": the trace's prompts of up to ", trace.prompt_max,
               " and outputs of up to ", trace.output_max, " tokens need ", needed, " positions");
  const std::string spec = args.get("-m");
  LlamaOptions lo = llama_options(args);
  if (spec.rfind("preset:", 0) == 0 && find_preset(spec.substr(7)).config.n_ctx < so.n_ctx) lo.preset_ctx = so.n_ctx;
  Engine engine = load_engine(args, spec, lo);
  const ModelInfo& info = engine.model->info();
  MINFER_CHECK(so.n_ctx <= info.n_ctx, spec, " has a context of ", info.n_ctx, " positions; the trace needs ",
               so.n_ctx, " (shorten --prompt-len or --output-len)");
  const std::vector<TraceRequest> requests = make_trace(trace, info.vocab_size, info.bos_id);
  std::vector<PolicyRun> runs;
  for (const std::string p : {"static", "continuous"}) {
    if (policy != "both" && policy != p) continue;
    so.policy = p == "static" ? SchedulerOptions::Policy::static_batches : SchedulerOptions::Policy::continuous;
    Scheduler scheduler(*engine.model, so);
    std::fprintf(stderr, "minfer: %s, %lld slots of %lld positions, %lld requests...\n", p.c_str(),
                 static_cast<long long>(so.slots), static_cast<long long>(scheduler.n_ctx()),
                 static_cast<long long>(trace.n_requests));
    runs.push_back({p, replay(scheduler, requests)});
  }

  nlohmann::ordered_json records = nlohmann::ordered_json::array();
  for (const auto& r : runs) records.push_back(to_json(r, info.name, so.slots, trace));
  if (output == "json") {
    std::printf("%s\n", records.dump(2).c_str());
  } else {
    std::printf("%s, %lld slots, %lld requests (prompts %lld-%lld, outputs %lld-%lld tokens, log-uniform), %s\n\n",
                info.name.c_str(), static_cast<long long>(so.slots), static_cast<long long>(trace.n_requests),
                static_cast<long long>(trace.prompt_min), static_cast<long long>(trace.prompt_max),
                static_cast<long long>(trace.output_min), static_cast<long long>(trace.output_max),
                trace.rate > 0 ? ("Poisson arrivals at " + std::to_string(trace.rate) + "/s").c_str()
                               : "all arriving at once");
    std::printf("| policy | seconds | output tok/s | mean busy slots | TTFT median / p90 / p99 (ms) | "
                "TPOT median / p90 / p99 (ms) |\n|---|---:|---:|---:|---|---|\n");
    for (const auto& r : runs) {
      const LatencySummary ttft = r.run.ttft(), tpot = r.run.tpot();
      std::printf("| %s | %.2f | %.1f | %.2f | %.0f / %.0f / %.0f | %.1f / %.1f / %.1f |\n", r.policy.c_str(),
                  r.run.seconds, r.run.output_tokens_per_second(), r.run.mean_occupancy(), ttft.median * 1e3,
                  ttft.p90 * 1e3, ttft.p99 * 1e3, tpot.median * 1e3, tpot.p90 * 1e3, tpot.p99 * 1e3);
    }
    if (runs.size() == 2 && runs[0].run.output_tokens_per_second() > 0)
      std::printf("\ncontinuous / static: %.2fx output tokens/s, median TPOT %.2fx\n",
                  runs[1].run.output_tokens_per_second() / runs[0].run.output_tokens_per_second(),
                  runs[0].run.tpot().median > 0 ? runs[1].run.tpot().median / runs[0].run.tpot().median : 0.0);
  }
  if (args.has("--save-json")) write_file_atomic(args.get("--save-json"), records.dump(2) + "\n");
  return 0;
}

}  // namespace minfer::cli
