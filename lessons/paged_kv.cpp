// demo paged-kv: what a server's KV memory holds. A layout that gives every sequence a whole
// context reserves ctx positions for a request that writes a few hundred, so a budget of four
// contexts runs four requests at once, whatever they need. Blocks (engine/block_pool.h, vLLM's
// PagedAttention) give a request only the blocks its positions reach, as it grows, so the same
// budget runs as many requests as their positions fit, and preempts the newest when they outgrow
// it. One seeded trace of varied prompt and output lengths (engine/serve_trace.h), one budget, the
// two layouts in turn: the memory reserved against the memory written over time, the most
// sequences that decode together, and the output tokens per second that follow from them.
//
// note: "whole contexts" is the scheduler with as many slots as the budget holds contexts, which
// is what the contiguous layout could run (its reserved memory is counted as slots in use x a whole
// context, rounded up to blocks, as that layout held them); "blocks" is the same budget with up to
// 64 slots.
#include <algorithm>

#include "engine/serve_trace.h"
#include "lessons/demos.h"
#include "model/llama.h"
#include "formats/model_files.h"

namespace minfer::demo {

namespace {

constexpr int64_t kContexts = 4;  // the budget, in whole contexts

struct Layout {
  std::string name;
  int64_t slots;
};

// One layout's figures over a run: MiB used and reserved averaged over its steps.
struct Figures {
  double tokens_per_second = 0, busy_mean = 0, used_mib = 0, reserved_mib = 0;
  int64_t busy_most = 0;
  uint64_t preemptions = 0;
};

void run_half(Report& r, const std::string& half, Backend& backend, const std::string& spec, DType dtype,
              const TraceOptions& trace_options, int rounds) {
  LlamaOptions lo;
  lo.dtype = dtype;
  const int64_t n_ctx = trace_options.prompt_max + trace_options.output_max - 1;
  if (spec.rfind("preset:", 0) == 0) lo.preset_ctx = std::max(n_ctx, find_preset(spec.substr(7)).config.n_ctx);
  auto model = load_model(spec, backend, lo);
  const std::vector<TraceRequest> trace = make_trace(trace_options, model->info().vocab_size, model->info().bos_id);
  const std::vector<Layout> layouts = {{"whole contexts", kContexts},
                                       {"blocks", std::min<int64_t>(64, trace_options.n_requests)}};
  std::vector<std::vector<Figures>> figures(layouts.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < layouts.size(); ++i) {
      SchedulerOptions so;
      so.slots = layouts[i].slots;
      so.n_ctx = n_ctx;
      so.pass_rows = std::max<int64_t>(256, so.slots);
      so.max_queue = trace_options.n_requests;
      so.kv_blocks = kContexts * KvCache::blocks_for(n_ctx, KvCache::block_size_for(n_ctx, so.kv_block_size));
      Scheduler scheduler(*model, so);
      const KvCache& cache = scheduler.decoder().cache();
      const double mib_per_position = double(cache.bytes()) / double(cache.n_blocks() * cache.block_size()) / 1048576.0;
      const double whole_context = double(cache.blocks_per_seq() * cache.block_size());
      const ServeRun run = replay(scheduler, trace);
      Figures f;
      f.tokens_per_second = run.output_tokens_per_second();
      f.busy_mean = run.mean_occupancy();
      f.busy_most = run.max_occupancy();
      f.preemptions = scheduler.metrics().preemptions;
      const size_t stride = std::max<size_t>(1, run.kv.size() / 200);
      for (size_t k = 0; k < run.kv.size(); ++k) {
        const ServeRun::KvSample& s = run.kv[k];
        const double used = double(s.positions) * mib_per_position;
        const double reserved = (i == 0 ? double(run.occupancy[k].second) * whole_context
                                        : double(s.blocks * cache.block_size())) * mib_per_position;
        f.used_mib += used / double(run.kv.size());
        f.reserved_mib += reserved / double(run.kv.size());
        if (round == rounds - 1 && k % stride == 0) {
          r.point(half, layouts[i].name + ": reserved", s.seconds, reserved);
          r.point(half, layouts[i].name + ": used", s.seconds, used);
        }
      }
      figures[i].push_back(f);
    }
  }
  auto median = [&](size_t i, auto get) {
    std::vector<double> v;
    for (const Figures& f : figures[i]) v.push_back(double(get(f)));
    return summarize(v).median;
  };
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < layouts.size(); ++i) {
    const double used = median(i, [](const Figures& f) { return f.used_mib; });
    const double reserved = median(i, [](const Figures& f) { return f.reserved_mib; });
    rows.push_back({layouts[i].name, std::to_string(layouts[i].slots),
                    fmt("%.0f", median(i, [](const Figures& f) { return f.busy_most; })),
                    fmt("%.1f", median(i, [](const Figures& f) { return f.busy_mean; })), fmt("%.1f", used),
                    fmt("%.1f", reserved), fmt("%.0f%%", reserved > 0 ? 100.0 * used / reserved : 0.0),
                    fmt("%.0f", median(i, [](const Figures& f) { return f.preemptions; })),
                    fmt("%.1f", median(i, [](const Figures& f) { return f.tokens_per_second; }))});
  }
  std::printf("%s: %s (%s weights), %lld requests, prompts %lld-%lld and outputs %lld-%lld tokens (log-uniform), all "
              "arriving at once; a KV budget of %lld contexts of %lld positions; medians of %d interleaved round%s\n",
              half.c_str(), spec.c_str(), dtype_name(dtype), static_cast<long long>(trace_options.n_requests),
              static_cast<long long>(trace_options.prompt_min), static_cast<long long>(trace_options.prompt_max),
              static_cast<long long>(trace_options.output_min), static_cast<long long>(trace_options.output_max),
              static_cast<long long>(kContexts), static_cast<long long>(n_ctx), rounds, rounds == 1 ? "" : "s");
  print_table({"layout", "slots", "most running", "mean running", "KV used MiB", "KV reserved MiB", "used / reserved",
               "preemptions", "output tokens/s"},
              rows);
  r.ran(half);
  // The ratio of output tokens per second is the median of the ratios within a round.
  std::vector<double> speedups;
  for (int round = 0; round < rounds; ++round)
    speedups.push_back(figures[0][round].tokens_per_second > 0
                           ? figures[1][round].tokens_per_second / figures[0][round].tokens_per_second
                           : 0.0);
  r.conclude(half, "in the same memory, blocks ran up to " + rows[1][2] + " requests at once (" + rows[1][3] +
                       " on average) against " + rows[0][2] + " (" + rows[0][3] + "), wrote " + rows[1][6] +
                       " of what they reserved against " + rows[0][6] + fmt(", and gave %.2fx", summarize(speedups).median) +
                       " the output tokens per second");
}

}  // namespace

void paged_kv(const Options& o) {
  Report r("paged-kv", "the KV cache as whole contexts against blocks, in one budget: MiB reserved and written");
  TraceOptions t;
  t.n_requests = o.quick ? 24 : 64;
  t.prompt_min = o.quick ? 8 : 16;
  t.prompt_max = o.quick ? 96 : 512;
  t.output_min = o.quick ? 8 : 16;
  t.output_max = o.quick ? 64 : 256;
  auto cpu = cpu_backend(o);
  const int rounds = o.quick ? 1 : 3;
  run_half(r, "cpu", *cpu, o.model_or(o.quick ? "preset:tiny" : "preset:stories15M"), DType::f32, t, rounds);
  if (!o.cuda) {
    r.skipped("cuda", "no CUDA device (" + o.cuda_reason + ")");
  } else {
    auto gpu = cuda_backend();
    run_half(r, "cuda", *gpu, o.model_or("preset:llama-1b"), DType::f16, t, rounds);
  }
  r.axes("seconds since the first request", "KV cache MiB", false, false);
  r.write(o.out_dir);
}

}  // namespace minfer::demo
