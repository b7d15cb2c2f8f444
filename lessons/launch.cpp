// demo launch: the launch tax.
// CUDA: N tiny kernels launched one by one against the same N captured in one CUDA Graph; then
// one decode step of stories15M, fused and unfused, with graphs on and off: time per step and
// ops (kernel launches, roughly) per token.
// CPU, the same tax for threads: N tiny tasks handed to the worker threads one hand-off at a
// time against one batched hand-off; and a CPU decode step with its element-wise ops fused
// against unfused.
#include <atomic>

#include "engine/decoder.h"
#include "engine/profiler.h"
#include "core/threads.h"
#include "model/llama.h"
#include "lessons/cuda_lessons.h"
#include "lessons/demos.h"
#include "formats/model_files.h"

namespace minfer::demo {

namespace {

struct StepResult {
  double ms_per_step;
  double ops_per_step;
};

// ms per decode step of `spec` at batch 1 (over `steps` steps), and backend ops per step.
StepResult decode_step(Backend& backend, const std::string& spec, Kernels kernels, bool graphs, int steps) {
  backend.set_recording(graphs);
  LlamaOptions options;
  options.kernels = kernels;
  auto model = load_model(spec, backend, options);
  DecoderOptions dec;
  dec.n_ctx = steps + 1;
  StepResult result{};
  {
    Decoder decoder(*model, dec);
    const double seconds = median_decode_seconds(decoder, backend, steps);
    result.ms_per_step = seconds / steps * 1e3;
  }
  ProfilingBackend counter(backend);  // count the ops of one step (outside the timing)
  auto counted = load_model(spec, counter, options);
  Decoder decoder(*counted, dec);
  decoder.prefill({{1}});
  counter.reset();
  decoder.decode({3});
  result.ops_per_step = static_cast<double>(counter.calls());
  return result;
}

}  // namespace

void launch(const Options& o) {
  Report r("launch", "the launch tax: many small launches or hand-offs against one");
  // CPU: hand-offs to the thread pool.
  auto cpu = cpu_backend(o);
  ThreadPool pool(o.threads);
  const int n = o.quick ? 2000 : 20000;
  std::atomic<int64_t> counter{0};
  const double one_by_one = median_seconds(5, [&] {
    for (int i = 0; i < n; ++i) pool.run(pool.size(), [&](int) { counter.fetch_add(1, std::memory_order_relaxed); });
  });
  const double batched = median_seconds(5, [&] {
    pool.run(n * pool.size(), [&](int) { counter.fetch_add(1, std::memory_order_relaxed); });
  });
  const std::string cpu_model = o.model_or("preset:stories15M");
  const int steps = o.quick ? 16 : 64;
  const StepResult cpu_fused = decode_step(*cpu, cpu_model, Kernels::fused, false, steps);
  const StepResult cpu_unfused = decode_step(*cpu, cpu_model, Kernels::unfused, false, steps);
  print_table({"CPU", "per hand-off or step", "ops per step"},
              {{fmt("%.0f tiny parallel regions, one by one", n), fmt("%.2f us", one_by_one / n * 1e6), "-"},
               {fmt("the same %.0f x threads tasks in one region", n), fmt("%.3f us", batched / n * 1e6), "-"},
               {"decode step, " + cpu_model + ", fused", fmt("%.3f ms", cpu_fused.ms_per_step), fmt("%.0f", cpu_fused.ops_per_step)},
               {"decode step, " + cpu_model + ", unfused", fmt("%.3f ms", cpu_unfused.ms_per_step), fmt("%.0f", cpu_unfused.ops_per_step)}});
  r.bar("cpu", "one hand-off per region (us)", one_by_one / n * 1e6);
  r.bar("cpu", "batched hand-off (us)", batched / n * 1e6);
  r.bar("cpu", "decode step fused (ms)", cpu_fused.ms_per_step);
  r.bar("cpu", "decode step unfused (ms)", cpu_unfused.ms_per_step);
  r.ran("cpu");
  r.conclude("cpu", fmt("a parallel region costs %.1f us to hand out and gather", one_by_one / n * 1e6) +
                        fmt(", %.0fx a task of a batched region", one_by_one / batched) +
                        fmt("; fusing the decode step's element-wise ops (%.0f ops", cpu_unfused.ops_per_step) +
                        fmt(" down to %.0f) makes it", cpu_fused.ops_per_step) +
                        fmt(" %.2fx faster", cpu_unfused.ms_per_step / cpu_fused.ms_per_step));
  if (!o.cuda) {
    r.skipped("cuda", "no CUDA device (" + o.cuda_reason + ")");
  } else {
    const int kernels = 1000;
    const double eager = cuda_lessons::empty_kernels_seconds(kernels, false);
    const double graph = cuda_lessons::empty_kernels_seconds(kernels, true);
    auto gpu = cuda_backend();
    std::vector<std::vector<std::string>> rows = {
        {fmt("%.0f empty kernels, launched one by one", kernels), fmt("%.2f us per kernel", eager / kernels * 1e6), "-"},
        {fmt("the same %.0f in one CUDA Graph", kernels), fmt("%.2f us per kernel", graph / kernels * 1e6), "-"}};
    r.bar("cuda", "empty kernel, eager (us)", eager / kernels * 1e6);
    r.bar("cuda", "empty kernel, in a graph (us)", graph / kernels * 1e6);
    double best = 0, worst = 0;
    for (Kernels set : {Kernels::fused, Kernels::unfused})
      for (bool graphs : {true, false}) {
        const StepResult s = decode_step(*gpu, o.model_or("preset:stories15M"), set, graphs, o.quick ? 32 : 128);
        const std::string name = std::string("decode step, ") + kernels_name(set) + ", graphs " + (graphs ? "on" : "off");
        rows.push_back({name, fmt("%.3f ms", s.ms_per_step), fmt("%.0f", s.ops_per_step)});
        r.bar("cuda", name + " (ms)", s.ms_per_step);
        if (set == Kernels::fused && graphs) best = s.ms_per_step;
        if (set == Kernels::unfused && !graphs) worst = s.ms_per_step;
      }
    print_table({"CUDA", "time", "ops per step"}, rows);
    r.ran("cuda");
    r.conclude("cuda", fmt("a CUDA Graph launches a kernel in %.2f us", graph / kernels * 1e6) +
                           fmt(" against %.2f us one by one", eager / kernels * 1e6) +
                           fmt("; fused kernels with graphs make a stories15M decode step %.1fx faster than unfused without", worst / best));
  }
  r.axes("", "us or ms", false, true);
  r.write(o.out_dir);
}

}  // namespace minfer::demo
