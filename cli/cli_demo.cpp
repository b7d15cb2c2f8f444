// `minfer demo NAME|all [--quick] [--out DIR]`: the GPU lessons as measured experiments.
#include <chrono>
#include <filesystem>
#include <cstdio>

#include "core/device.h"
#include "core/error.h"
#include "core/files.h"
#include "engine/communicator.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "lessons/demos.h"

namespace minfer::cli {

namespace {

struct Lesson {
  const char* name;
  void (*run)(const demo::Options&);
  const char* what;
};

const Lesson kLessons[] = {
    {"divergence", demo::divergence, "the branch tax: predictable vs unpredictable branches, divergent warps"},
    {"sequential", demo::sequential, "the autoregressive tax: 128 dependent steps vs one batched pass"},
    {"crossover", demo::crossover, "square products from 8 to 4096: where the GPU starts to win"},
    {"transfer", demo::transfer, "memcpy across the cache levels; PCIe (pageable, pinned) vs HBM"},
    {"roofline", demo::roofline, "the measured ceilings and minfer's kernels under them"},
    {"tensor-cores", demo::tensor_cores, "naive, tiled, SIMD, bf16 and Tensor Core matrix products"},
    {"launch", demo::launch, "the launch tax: hand-offs, kernel launches, CUDA Graphs, fusion"},
    {"batching", demo::batching, "decode tokens/s against batch size under both ceilings"},
    {"bytes", demo::bytes, "decode tokens/s against bytes per weight: f32, f16, bf16, q8_0"},
    {"continuous", demo::continuous, "static batches against continuous batching on one request trace"},
    {"speculative", demo::speculative, "speculative decoding: a q8_0 self-draft and prompt lookup against k"},
    {"prompt-cache", demo::prompt_cache, "time to first token by turn of a conversation, with and without prompt caching"},
    {"paged-kv", demo::paged_kv, "the KV cache as whole contexts against blocks in one budget: memory, sequences, tok/s"},
    {"experts", demo::experts, "a mixture of experts: experts read a step and decode tokens/s against batch size"},
    {"tensor-parallel", demo::tensor_parallel, "a model split over ranks: decode steps, all-reduce latency, a GPU pair's links"},
};

}  // namespace

int cmd_demo(int argc, char** argv) {
  Args args("demo", "Runs a lesson (or all) on the CPU, and on CUDA where a GPU is present; writes NAME.json.",
            {{"--list", "", "name the demos and which halves can run here"},
             {"--quick", "", "smaller sizes: every CPU half in seconds"},
             {"--out", "DIR", "where NAME.json goes (default ./results)"},
             {"-m,--model", "MODEL", "the model of sequential, launch, batching, bytes, continuous, speculative,\n"
                                       "                              prompt-cache and paged-kv (default: their presets)"},
             {"-t,--threads", "N", "CPU threads (default: every core)"}});
  std::string name;
  if (argc >= 3 && argv[2][0] != '-') name = argv[2];
  args.parse(argc, argv, name.empty() ? 2 : 3);
  if (args.help_requested()) {
    std::printf("%s\ndemos: all", args.usage().c_str());
    for (const auto& l : kLessons) std::printf(", %s", l.name);
    std::printf("\n");
    return 0;
  }
  demo::Options o;
  o.cuda = cuda_device_count(&o.cuda_reason) > 0;
  if (args.has("--list")) {
    for (const auto& l : kLessons)
      std::printf("%-13s %s\n              halves here: cpu, %s\n", l.name, l.what,
                  o.cuda ? "cuda" : ("cuda skipped (no CUDA device: " + o.cuda_reason + ")").c_str());
    return 0;
  }
  MINFER_CHECK(!name.empty(), "demo: name a demo or all (minfer demo --list)");
  o.quick = args.has("--quick");
  o.model = args.get("-m", "");
  o.out_dir = args.get("--out", "results");
  // The output directory is made (and checked writable) before any demo runs, not after.
  std::error_code error;
  std::filesystem::create_directories(o.out_dir, error);
  if (error) fail("--out: cannot create ", o.out_dir, ": ", error.message());
  check_output_path(o.out_dir + "/.probe.json", "--out");
  o.threads = static_cast<int>(args.get_int("-t", 0, 1, 1024));
  if (started_by_mpi_launcher()) {  // the ranks tensor-parallel starts for its all-reduce sweep
    MINFER_CHECK(name == "tensor-parallel", "under mpirun only demo tensor-parallel runs (it starts mpirun itself)");
    demo::tensor_parallel_ranks(o);
    return 0;
  }
  bool found = false;
  const auto start = std::chrono::steady_clock::now();
  for (const auto& l : kLessons)
    if (name == "all" || name == l.name) {
      found = true;
      l.run(o);
    }
  MINFER_CHECK(found, "demo: no demo called '", name, "' (minfer demo --list)");
  std::printf("\ndemo %s took %.1f s\n", name.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return 0;
}

}  // namespace minfer::cli
