// `minfer bench-serve`: serving throughput and latency on a synthetic trace (engine/serve_trace.h),
// replayed against the scheduler in this process, or against a running `minfer serve` over HTTP
// (--url), as vLLM's serving benchmark reports them: output tokens per second, time to first token
// and time per output token (mean, median, p90, p99), with continuous batching, static batches, or
// both on the same trace.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <tuple>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "engine/serve_trace.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "serve/serve_client.h"

namespace minfer::cli {

using namespace minfer::serve;  // the server's library (serve/)

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
  std::string url;  // empty: in this process
  int64_t connections = 0;
  std::string kv_dtype;  // in this process: the KV cache's type
  // In this process: the scheduler's counters at the end (forward passes, prompt rows computed,
  // recomputation after preemptions included, prompt tokens found cached, preemptions).
  std::optional<SchedulerMetrics> metrics;
};

nlohmann::ordered_json to_json(const PolicyRun& p, const std::string& model, int64_t slots, const TraceOptions& t) {
  auto summary = [](const LatencySummary& s) {
    return nlohmann::ordered_json{{"mean", s.mean}, {"median", s.median}, {"p90", s.p90}, {"p99", s.p99}};
  };
  nlohmann::ordered_json j;
  j["model"] = model;
  j["policy"] = p.policy;
  j["slots"] = slots;
  if (!p.kv_dtype.empty()) j["kv_dtype"] = p.kv_dtype;
  j["requests"] = t.n_requests;
  j["rate"] = t.rate;
  j["prompt_len"] = {t.prompt_min, t.prompt_max};
  j["shared_prefix"] = t.shared_prefix;
  j["output_len"] = {t.output_min, t.output_max};
  j["seconds"] = p.run.seconds;
  j["prompt_tokens"] = p.run.prompt_tokens;
  j["output_tokens"] = p.run.output_tokens;
  j["output_tokens_per_second"] = p.run.output_tokens_per_second();
  j["mean_busy_slots"] = p.run.mean_occupancy();
  j["max_busy_slots"] = p.run.max_occupancy();
  j["ttft_seconds"] = summary(p.run.ttft());
  j["tpot_seconds"] = summary(p.run.tpot());
  if (p.metrics) {
    j["steps"] = p.metrics->steps;
    j["prompt_rows_computed"] = p.metrics->prompt_tokens;
    j["prompt_tokens_cached"] = p.metrics->prompt_tokens_cached;
    j["preemptions"] = p.metrics->preemptions;
  }
  if (!p.url.empty()) {
    j["url"] = p.url;
    j["connections"] = p.connections;
  }
  j["build_commit"] = build_commit();
  return j;
}

// The trace against the scheduler in this process, with each policy asked for.
void run_in_process(const Args& args, const std::string& policy, const TraceOptions& trace, int64_t needed,
                    std::vector<PolicyRun>* runs, std::string* model_name, int64_t* slots) {
  SchedulerOptions so;
  so.slots = args.get_int("--slots", 16, 1, 4096);
  so.pass_rows = args.get_int("--step-tokens", 256, 1, 1 << 20);
  so.max_queue = trace.n_requests;
  so.kv_dtype = kv_dtype_option(args);
  so.prompt_cache = !args.has("--no-prompt-cache");

  // Every request of the trace must fit a slot: the longest prompt plus the longest output.
  so.n_ctx = args.has("--ctx") ? args.get_int("--ctx", 0, 1, 1 << 20) : needed;
  MINFER_CHECK(so.n_ctx >= needed, "--ctx ", so.n_ctx, ": the trace's prompts of up to ",
               trace.shared_prefix + trace.prompt_max, " and outputs of up to ", trace.output_max, " tokens need ", needed, " positions");
  const std::string spec = args.get("-m");
  LlamaOptions lo = llama_options(args);
  if (spec.rfind("preset:", 0) == 0 && find_preset(spec.substr(7)).config.n_ctx < so.n_ctx) lo.preset_ctx = so.n_ctx;
  Engine engine = load_engine(args, spec, lo);
  const ModelInfo& info = engine.model->info();
  MINFER_CHECK(so.n_ctx <= info.n_ctx, spec, " has a context of ", info.n_ctx, " positions; the trace needs ",
               so.n_ctx, " (shorten --prompt-len or --output-len)");
  const std::vector<TraceRequest> requests = make_trace(trace, info.vocab_size, info.bos_id);
  kv_cache_mib_option(args, info, *engine.backend, &so);
  for (const std::string p : {"static", "continuous"}) {
    if (policy != "both" && policy != p) continue;
    so.policy = p == "static" ? SchedulerOptions::Policy::static_batches : SchedulerOptions::Policy::continuous;
    SchedulerOptions run_options = so;
    if (p == "static") run_options.kv_blocks = 0;  // static batches keep a whole context per slot
    Scheduler scheduler(*engine.model, run_options);
    const KvCache& cache = scheduler.decoder().cache();
    std::fprintf(stderr, "minfer: %s, %lld slots, KV cache %s (%lld blocks of %lld positions), %lld requests...\n",
                 p.c_str(), static_cast<long long>(so.slots), format_bytes(cache.bytes()).c_str(),
                 static_cast<long long>(cache.n_blocks()), static_cast<long long>(cache.block_size()),
                 static_cast<long long>(trace.n_requests));
    ServeRun run = replay(scheduler, requests);
    runs->push_back({p, std::move(run), "", 0, dtype_name(scheduler.decoder().cache().dtype()), scheduler.metrics()});
  }
  *model_name = info.name;
  *slots = so.slots;
}

void print_runs(const Args& args, const std::vector<PolicyRun>& runs, const std::string& model_name, int64_t slots,
                const TraceOptions& trace) {
  const std::string output = args.get("-o", "md");
  nlohmann::ordered_json records = nlohmann::ordered_json::array();
  for (const auto& r : runs) records.push_back(to_json(r, model_name, slots, trace));
  if (output == "json") {
    std::printf("%s\n", records.dump(2).c_str());
  } else {
    const std::string shared =
        trace.shared_prefix > 0 ? std::to_string(trace.shared_prefix) + " shared tokens, then " : "";
    std::printf("%s, %lld slots, %lld requests (prompts %s%lld-%lld, outputs %lld-%lld tokens, log-uniform), %s\n\n",
                model_name.c_str(), static_cast<long long>(slots), static_cast<long long>(trace.n_requests),
                shared.c_str(), static_cast<long long>(trace.prompt_min), static_cast<long long>(trace.prompt_max),
                static_cast<long long>(trace.output_min), static_cast<long long>(trace.output_max),
                trace.rate > 0 ? ("Poisson arrivals at " + std::to_string(trace.rate) + "/s").c_str()
                               : "all arriving at once");
    std::printf("| policy | seconds | output tok/s | busy slots mean / most | TTFT median / p90 / p99 (ms) | "
                "TPOT median / p90 / p99 (ms) |\n|---|---:|---:|---:|---|---|\n");
    for (const auto& r : runs) {
      const LatencySummary ttft = r.run.ttft(), tpot = r.run.tpot();
      std::printf("| %s | %.2f | %.1f | %.2f / %lld | %.0f / %.0f / %.0f | %.1f / %.1f / %.1f |\n", r.policy.c_str(),
                  r.run.seconds, r.run.output_tokens_per_second(), r.run.mean_occupancy(),
                  static_cast<long long>(r.run.max_occupancy()), ttft.median * 1e3,
                  ttft.p90 * 1e3, ttft.p99 * 1e3, tpot.median * 1e3, tpot.p90 * 1e3, tpot.p99 * 1e3);
    }
    for (const auto& r : runs)
      if (r.metrics)
        std::printf("\n%s: %llu forward passes; %llu prompt rows computed for %lld prompt tokens (%llu found "
                    "cached, recomputation after %llu preemptions included)\n",
                    r.policy.c_str(), static_cast<unsigned long long>(r.metrics->steps),
                    static_cast<unsigned long long>(r.metrics->prompt_tokens), static_cast<long long>(r.run.prompt_tokens),
                    static_cast<unsigned long long>(r.metrics->prompt_tokens_cached),
                    static_cast<unsigned long long>(r.metrics->preemptions));
    if (runs.size() == 2 && runs[0].run.output_tokens_per_second() > 0)
      std::printf("\ncontinuous / static: %.2fx output tokens/s, median TPOT %.2fx\n",
                  runs[1].run.output_tokens_per_second() / runs[0].run.output_tokens_per_second(),
                  runs[0].run.tpot().median > 0 ? runs[1].run.tpot().median / runs[0].run.tpot().median : 0.0);
  }
  if (args.has("--save-json")) write_file_atomic(args.get("--save-json"), records.dump(2) + "\n");
}

}  // namespace

int cmd_bench_serve(int argc, char** argv) {
  std::vector<Option> options = engine_options();
  options.insert(options.end(), {
      {"--policy", "P", "continuous, static or both (default both): per-step scheduling, or batches that\n"
                        "                              start only when every slot is free"},
      {"--slots", "N", "sequences decoded together at most (default 16)"},
      {"--step-tokens", "N", "rows per forward pass, decode rows and prompt chunks (default 256)"},
      {"--ctx", "N", "positions a request may reach (default: the longest prompt + output of the trace); a\n"
                     "                              preset is given this context if its own is shorter"},
      {"--kv-cache-mib", "N", "continuous policy: a KV cache of N MiB, in blocks that requests take as they\n"
                              "                              grow (default: slots x ctx positions; static batches always)"},
      {"--requests", "N", "requests in the trace (default 200)"},
      {"--rate", "R", "arrivals per second, a Poisson process; 0 sends every request at once (default 0)"},
      {"--prompt-len", "LO-HI", "prompt lengths, log-uniform (default 16-256)"},
      {"--output-len", "LO-HI", "output lengths, log-uniform (default 8-256)"},
      {"--temp", "T", "sampling temperature of every request (default 0, greedy)"},
      {"--seed", "S", "the trace's seed (default 1)"},
      {"--shared-prefix", "N", "every prompt begins with the same N tokens (a system prompt), then its own\n"
                               "                              --prompt-len tokens (default 0)"},
      {"--no-prompt-cache", "", "in this process: no prefix caching (every prompt prefilled whole)"},
      {"--url", "URL", "replay against a running minfer serve or llama.cpp llama-server\n"
                       "                              (http://127.0.0.1:8080) instead of this process; its model,\n"
                       "                              slots and context are the server's"},
      {"--connections", "N", "with --url: requests in flight at most, one connection each (default 32)"},
      {"-o,--output", "FMT", "md or json (default md)"},
      {"--save-json", "PATH", "also write the JSON records to PATH"},
  });
  Args args("bench-serve",
            "Replays a synthetic serving trace against the continuous-batching scheduler in this process, or\n"
            "against a running minfer serve or llama-server, and reports output tokens/s, time to first token and time per\n"
            "output token.",
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
  trace.shared_prefix = args.get_int("--shared-prefix", 0, 0, 1 << 20);
  // Positions the longest request needs.
  const int64_t needed = trace.shared_prefix + trace.prompt_max + trace.output_max - 1;
  std::vector<PolicyRun> runs;
  std::string model_name;
  int64_t slots = 0;
  if (args.has("--url")) {
    // Every option of a run in this process does nothing against a server: refused, by name.
    std::vector<std::string> local = {"--slots", "--step-tokens", "--ctx", "--kv-cache-mib", "--no-prompt-cache"};
    for (const Option& o : engine_options()) local.push_back(o.names.substr(o.names.rfind(',') + 1));
    for (const std::string& name : local)
      MINFER_CHECK(!args.has(name), name, ": with --url the server's settings are measured (give ", name,
                   " to minfer serve)");
    MINFER_CHECK(policy != "static", "--policy static: a server schedules continuously (drop --url to compare)");
    const std::string url = args.get("--url");
    const int64_t connections = args.get_int("--connections", 32, 1, 4096);
    const ServerInfo server = query_server(url);
    const int64_t longest_prompt = trace.shared_prefix + trace.prompt_max;
    MINFER_CHECK(needed <= server.n_ctx, url, " serves ", server.n_ctx, " positions per request; the trace's prompts of up to ",
                 longest_prompt, " and outputs of up to ", trace.output_max, " tokens need ", needed);
    MINFER_CHECK(longest_prompt <= server.max_prompt_tokens && trace.output_max <= server.max_tokens_limit, url,
                 " takes prompts of up to ", server.max_prompt_tokens, " tokens and max_tokens up to ",
                 server.max_tokens_limit, "; the trace asks for up to ", longest_prompt, " and ", trace.output_max);
    model_name = server.model;
    slots = server.slots;
    const std::vector<TraceRequest> requests = make_trace(trace, server.vocab_size, server.bos_id);
    std::fprintf(stderr, "minfer: %s at %s, %lld requests over at most %lld connections...\n", model_name.c_str(),
                 url.c_str(), static_cast<long long>(trace.n_requests), static_cast<long long>(connections));
    runs.push_back({"server", replay_http(url, requests, static_cast<int>(connections)), url, connections, "", std::nullopt});
  } else {
    MINFER_CHECK(!args.has("--connections"), "--connections: only with --url");
    run_in_process(args, policy, trace, needed, &runs, &model_name, &slots);
  }
  print_runs(args, runs, model_name, slots, trace);
  return 0;
}

}  // namespace minfer::cli
