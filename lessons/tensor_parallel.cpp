// demo tensor-parallel: what splitting a model over ranks costs (issue 54; docs/parallel.md).
//
// A model split by Megatron's rule (model/tensor_split.h) reads 1/N of the weights a rank and
// pays two all-reduces a layer of one row of dim floats per sequence: on one machine the weight
// reads shrink and the all-reduces are the tax. The lesson measures both on this host and
// predicts them for a pair of GPUs:
//   - a decode step at 1 and 2 ranks (and 4 where there are 4 cores), each `mpirun -np N minfer
//     bench` of a model file, rank 0's step split into its all-reduces (bench counts them) and the
//     rest, which is mostly weight reads; the threads are shared between the ranks;
//   - all-reduce latency against message size between 2 ranks, the best of 5 repetitions of 20
//     (bench --roofline's communication row): the lesson starts itself under mpirun
//     (`tensor_parallel_ranks`), and rank 0 prints a line per size;
//   - a ring all-reduce between 2 GPUs takes 2 a + S / B (each GPU sends half of S twice; a, the
//     latency of a step, B a link's bandwidth each way): over PCIe 4.0 x16 (32 GB/s) and NVLink 4
//     (450 GB/s), against a decode step of llama-7b's shape in f16 (13.5 GB of weights, half on
//     each GPU, read at an H100's 3.35 TB/s), at batch 1 and 64. Predicted, not measured.
// On one machine the ranks share its cores and its memory bandwidth: 2 ranks of 1 thread read the
// same bytes a step as one process of 2 threads, each rank half of them. Where a rank's half fits
// in a cache the whole does not, or one process's threads wait for each other at every op, the
// ranks can be faster; what they add is the all-reduces, whose share of the step the table gives.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/threads.h"
#include "engine/communicator.h"
#include "engine/roofline.h"
#include "lessons/demos.h"

namespace minfer::demo {

namespace {

// The link model: a's are assumed (NCCL's small-message latency is a few microseconds), the
// bandwidths are the links' one-way figures.
struct Link {
  const char* name;
  double gbps;       // GB/s each way
  double latency_s;  // a: one step of the ring
};
constexpr Link kLinks[] = {{"PCIe 4.0 x16", 32.0, 5e-6}, {"NVLink 4", 450.0, 2e-6}};

// llama-7b in f16 on a GPU pair.
constexpr double kLlama7bWeightBytes = 13.5e9;
constexpr double kLlama7bDim = 4096, kLlama7bLayers = 32;
constexpr double kHbmGbps = 3350.0;  // an H100 SXM's HBM3

double ring_all_reduce_seconds(const Link& link, double bytes) {
  return 2 * link.latency_s + bytes / (link.gbps * 1e9);  // 2 ranks: 2 (n - 1) / n = 1
}

std::string quoted(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string self_path() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  MINFER_CHECK(n > 0, "demo tensor-parallel: cannot find its own executable (/proc/self/exe)");
  return std::string(path, size_t(n));
}

// Runs a command line (quoted arguments) and returns its standard output; Error if it fails.
std::string run_command(const std::vector<std::string>& args) {
  std::string line;
  for (const std::string& a : args) line += quoted(a) + " ";
  line += "2>/dev/null";
  FILE* pipe = popen(line.c_str(), "r");
  MINFER_CHECK(pipe != nullptr, "demo tensor-parallel: cannot run ", args[0]);
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int status = pclose(pipe);
  MINFER_CHECK(status == 0, "demo tensor-parallel: '", line, "' failed (status ", status, ")");
  return out;
}

std::vector<std::string> mpirun(int ranks) {
  std::vector<std::string> args = {MINFER_MPIEXEC, "--oversubscribe", "-np", std::to_string(ranks)};
  if (geteuid() == 0) args.insert(args.begin() + 1, "--allow-run-as-root");
  return args;
}

struct Step {
  double seconds = 0, all_reduce_seconds = 0, all_reduces = 0;
};

// Rank 0's mean decode step of `model` at `ranks` ranks of `threads` threads each (bench's tg row).
Step decode_step(const std::string& model, int ranks, int threads, int steps) {
  std::vector<std::string> args = mpirun(ranks);
  args.insert(args.end(), {self_path(), "bench", "-m", model, "--device", "cpu", "-p", "0", "-n", std::to_string(steps),
                           "-r", "3", "-t", std::to_string(threads), "-o", "json"});
  const nlohmann::json rows = nlohmann::json::parse(run_command(args));
  for (const auto& row : rows)
    if (row.at("n_gen").get<int64_t>() == steps)
      return {1.0 / row.at("avg_ts").get<double>(), row.at("all_reduce_seconds_per_step").get<double>(),
              row.at("all_reduces_per_step").get<double>()};
  fail("demo tensor-parallel: bench printed no tg", steps, " row");
}

// The all-reduce sizes of the latency sweep: 4 bytes (one float) to 1 MiB (quick) or 64 MiB.
std::vector<int64_t> sweep_bytes(bool quick) {
  std::vector<int64_t> sizes;
  for (int64_t bytes = 4; bytes <= (quick ? int64_t(1) << 20 : int64_t(64) << 20); bytes *= 4) sizes.push_back(bytes);
  return sizes;
}

// Seconds per all-reduce of each sweep size, from the lesson started under mpirun -np 2.
std::vector<double> measured_all_reduces(const Options& o) {
  std::vector<std::string> args = mpirun(2);
  args.insert(args.end(), {self_path(), "demo", "tensor-parallel", "--out", o.out_dir});
  if (o.quick) args.push_back("--quick");
  std::vector<double> seconds;
  const std::string out = run_command(args);
  for (size_t at = out.find("all-reduce "); at != std::string::npos; at = out.find("all-reduce ", at + 1)) {
    long long bytes = 0;
    double s = 0;
    if (std::sscanf(out.c_str() + at, "all-reduce %lld bytes %lf s", &bytes, &s) == 2) seconds.push_back(s);
  }
  MINFER_CHECK(seconds.size() == sweep_bytes(o.quick).size(), "demo tensor-parallel: the ranks printed ",
               seconds.size(), " all-reduce sizes of ", sweep_bytes(o.quick).size());
  return seconds;
}

void measure_decode(const Options& o, Report& r, std::string* conclusion) {
  const int cores = o.threads > 0 ? o.threads : ThreadPool::hardware_threads();
  std::string model = o.model;
  const std::string made = o.out_dir + "/.tensor-parallel-model.gguf";
  if (model.empty()) {
    run_command({self_path(), "make-model", "-o", made, "--format", "gguf", "--preset", o.quick ? "stories15M" : "stories110M"});
    model = made;
  }
  const int steps = o.quick ? 16 : 64;
  std::vector<std::vector<std::string>> rows;
  Step one;
  for (int ranks : {1, 2, 4}) {
    if (ranks > 2 && ranks > cores) break;
    const int threads = std::max(1, cores / ranks);
    const Step step = decode_step(model, ranks, threads, steps);
    if (ranks == 1) one = step;
    const double rest = step.seconds - step.all_reduce_seconds;
    rows.push_back({std::to_string(ranks), std::to_string(threads), fmt("%.3f", 1e3 * step.seconds),
                    fmt("%.0f", step.all_reduces), fmt("%.3f", 1e3 * step.all_reduce_seconds), fmt("%.3f", 1e3 * rest),
                    fmt("%.0f%%", 100 * step.all_reduce_seconds / step.seconds)});
    const std::string tag = std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks");
    r.bar("cpu", tag + ": the rest of a step", 1e6 * rest);  // microseconds, the plot's one y axis
    if (ranks > 1) r.bar("cpu", tag + ": its all-reduces", 1e6 * step.all_reduce_seconds);
    if (ranks == 2)
      *conclusion = fmt("a decode step at 2 ranks (%.0f thread each) took ", threads) +
                    fmt("%.3f ms against ", 1e3 * step.seconds) + fmt("%.3f ms in one process ", 1e3 * one.seconds) +
                    fmt("of %.0f threads", cores) + fmt(" (%.2fx faster), ", one.seconds / step.seconds) +
                    fmt("its %.0f all-reduces ", step.all_reduces) +
                    fmt("%.0f%% of it", 100 * step.all_reduce_seconds / step.seconds);
  }
  if (model == made) std::remove(made.c_str());
  std::printf("a decode step of %s at 1, 2 (and 4) ranks, the threads shared out (rank 0's figures):\n", model.c_str());
  print_table({"ranks", "threads each", "step ms", "all-reduces", "all-reduce ms", "the rest ms", "all-reduce share"}, rows);
}

void measure_latency(const Options& o, Report& r) {
  const std::vector<int64_t> sizes = sweep_bytes(o.quick);
  const std::vector<double> seconds = measured_all_reduces(o);
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double bytes = double(sizes[i]);
    r.point("cpu", "all-reduce between 2 ranks here (measured)", bytes, 1e6 * seconds[i]);
    std::vector<std::string> row = {std::to_string(sizes[i]), fmt("%.1f", 1e6 * seconds[i])};
    for (const Link& link : kLinks) row.push_back(fmt("%.1f", 1e6 * ring_all_reduce_seconds(link, bytes)));
    rows.push_back(row);
  }
  std::printf("\nall-reduce latency against message size, 2 ranks (microseconds; the links predicted):\n");
  print_table({"bytes", "measured here", std::string(kLinks[0].name) + " pair", std::string(kLinks[1].name) + " pair"},
              rows);
}

// A decode step of llama-7b in f16 over a GPU pair: half the weights each, 64 all-reduces of
// batch x dim f16 values over each link.
std::string predict_gpu_pair(const Options& o, Report& r) {
  for (const Link& link : kLinks)
    for (int64_t bytes : sweep_bytes(o.quick))
      r.point("cpu", std::string(link.name) + " pair (predicted)", double(bytes),
              1e6 * ring_all_reduce_seconds(link, double(bytes)));
  const double reads = kLlama7bWeightBytes / 2 / (kHbmGbps * 1e9);
  std::vector<std::vector<std::string>> rows;
  std::string text = "on a GPU pair at llama-7b's shape in f16 the all-reduces would be";
  for (int batch : {1, 64}) {
    const double bytes = batch * kLlama7bDim * 2;
    std::vector<double> shares;
    for (const Link& link : kLinks) {
      const double reduce = 2 * kLlama7bLayers * ring_all_reduce_seconds(link, bytes);
      shares.push_back(100 * reduce / (reads + reduce));
      rows.push_back({std::to_string(batch), link.name, fmt("%.2f", 1e3 * reads), fmt("%.0f", bytes),
                      fmt("%.2f", 1e3 * reduce), fmt("%.0f%%", shares.back())});
    }
    text += fmt(" %.0f%% (", shares[0]) + kLinks[0].name + fmt(") and %.0f%% (", shares[1]) + kLinks[1].name +
            fmt(") of a batch-%.0f step", batch) + (batch == 1 ? "," : "");
  }
  std::printf("\npredicted: a decode step of llama-7b (f16) on 2 GPUs, %.1f GB of weights each at %.0f GB/s, 64 all-reduces "
              "(a = %.0f us on PCIe, %.0f us on NVLink, assumed):\n", kLlama7bWeightBytes / 2e9, kHbmGbps,
              1e6 * kLinks[0].latency_s, 1e6 * kLinks[1].latency_s);
  print_table({"batch", "link", "weight reads ms", "all-reduce bytes", "all-reduces ms", "share of the step"}, rows);
  return text + " (predicted)";
}

}  // namespace

void tensor_parallel(const Options& o) {
  Report r("tensor-parallel", "tensor parallelism: a decode step against ranks, all-reduce latency, a GPU pair's links");
  std::string decode;
  if (std::string(MINFER_MPIEXEC).empty()) {
    std::printf("this minfer was built without MPI: nothing measured, the GPU pair predicted\n");
  } else {
    measure_decode(o, r, &decode);
    measure_latency(o, r);
  }
  const std::string predicted = predict_gpu_pair(o, r);
  r.ran("cpu");
  r.conclude("cpu", (decode.empty() ? "" : decode + "; ") + predicted);
  if (!o.cuda)
    r.skipped("cuda", "no CUDA device (" + o.cuda_reason + ")");
  else
    r.skipped("cuda", "a GPU pair's all-reduces over NCCL are not measured by this lesson (its CPU half predicts them)");
  r.axes("all-reduce bytes", "microseconds", true, true);
  r.write(o.out_dir);
}

void tensor_parallel_ranks(const Options& o) {
  Communicator& world = world_communicator();
  MINFER_CHECK(world.size() >= 2, "demo tensor-parallel under mpirun wants 2 ranks or more, not ", world.size());
  const std::unique_ptr<Backend> cpu = cpu_backend(o);
  for (int64_t bytes : sweep_bytes(o.quick)) {
    const double seconds = measure_all_reduce_seconds(world, *cpu, bytes / 4);  // bench --roofline's row
    if (world.rank() == 0) std::printf("all-reduce %lld bytes %.9g s\n", static_cast<long long>(bytes), seconds);
  }
}

}  // namespace minfer::demo
