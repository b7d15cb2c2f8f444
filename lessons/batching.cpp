// demo batching: decode throughput against batch size. At batch 1 every step reads all the
// weights to produce one token per sequence: the memory-bound ceiling, bandwidth / bytes per
// step x B, rises with B. The compute-bound ceiling, peak FLOP/s / FLOPs per token, does not.
// Measured throughput follows the first until it meets the second: the curve bends there.
#include "engine/decoder.h"
#include "engine/roofline.h"
#include "model/llama.h"
#include "model/llama_cost.h"
#include "lessons/demos.h"
#include "formats/model_files.h"

namespace minfer::demo {

namespace {

void run_half(Report& r, const std::string& half, Backend& backend, const std::string& spec, DType dtype,
              const std::vector<int64_t>& batches, int steps, const std::string& suffix = "") {
  const Roofline roof = measure_roofline(backend, dtype);
  LlamaOptions options;
  options.dtype = dtype;
  auto model = load_model(spec, backend, options);
  const LlamaConfig& c = model->config();
  std::vector<std::vector<std::string>> rows;
  double first = 0, best = 0;
  int64_t bend = 0;
  for (int64_t B : batches) {
    DecoderOptions dec;
    dec.n_seqs = B;
    dec.n_ctx = steps;
    Decoder decoder(*model, dec);
    std::vector<int32_t> tokens(static_cast<size_t>(B), 5);
    const double seconds = median_seconds(3, [&] {
      decoder.reset();
      for (int i = 0; i < steps; ++i) decoder.decode(tokens);
    }, [&] { backend.synchronize(); });
    const double measured = double(B * steps) / seconds;
    const int64_t mid = steps / 2;
    const DType kv = decoder.cache().dtype();
    // The bandwidth of the level the step's bytes live in (engine/roofline.h).
    const uint64_t step_bytes = decode_step_bytes(c, dtype, kv, B, mid);
    const double memory_ceiling = roof.level_for(step_bytes).read_gbps * 1e9 / double(step_bytes) * double(B);
    const double compute_ceiling = roof.peak_gflops * 1e9 / (double(decode_step_flops(c, B, mid)) / double(B));
    if (B == batches.front()) first = measured;
    if (bend == 0 && measured < 0.5 * memory_ceiling) bend = B;
    best = std::max(best, measured);
    r.point(half, "measured" + suffix, double(B), measured);
    r.point(half, "memory-bound ceiling" + suffix, double(B), memory_ceiling);
    if (suffix.empty()) r.point(half, "compute-bound ceiling", double(B), compute_ceiling);
    rows.push_back({std::to_string(B), fmt("%.0f", measured), fmt("%.0f", memory_ceiling), fmt("%.0f", compute_ceiling),
                    fmt("%.0f%%", 100 * measured / std::min(memory_ceiling, compute_ceiling))});
  }
  std::printf("%s: %s, %s weights; ceilings measured: %s\n", half.c_str(), spec.c_str(), dtype_name(dtype), roof.describe().c_str());
  print_table({"B", "tokens/s", "memory-bound ceiling", "compute-bound ceiling", "of the lower"}, rows);
  if (suffix.empty()) r.ran(half);
  r.conclude(half, dtype_name(dtype) + std::string(" weights: ") + fmt("throughput grows %.1fx from B = 1", best / first) +
                       fmt(" to B = %.0f", double(batches.back())) +
                       (bend > 0 ? fmt(" and falls below half the memory-bound ceiling from B = %.0f", double(bend)) +
                                       ": the curve bends where reading the weights stops being the limit"
                                 : std::string(": it stays near the memory-bound ceiling over the whole range")));
}

}  // namespace

void batching(const Options& o) {
  Report r("batching", "decode tokens/s against batch size, under the memory-bound and compute-bound ceilings");
  auto cpu = cpu_backend(o);
  const std::vector<int64_t> cpu_batches = o.quick ? std::vector<int64_t>{1, 2, 4, 8, 16, 32}
                                                   : std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256};
  // stories42M: 168 MB of f32 weights, beyond many L3s; where it fits in one, its memory-bound
  // ceiling is that cache's bandwidth.
  run_half(r, "cpu", *cpu, o.model_or("preset:stories42M"), DType::f32, cpu_batches, o.quick ? 8 : 32);
  // 8-bit weights: a quarter of the bytes, so the memory-bound ceiling starts 3.76x higher and
  // meets the compute-bound one at a smaller batch.
  run_half(r, "cpu", *cpu, o.model_or("preset:stories42M"), DType::q8_0, cpu_batches, o.quick ? 8 : 32, " (q8_0)");
  if (!o.cuda) {
    r.skipped("cuda", "no CUDA device (" + o.cuda_reason + ")");
  } else {
    auto gpu = cuda_backend();
    run_half(r, "cuda", *gpu, o.model_or("preset:llama-1b"), DType::f16, {1, 2, 4, 8, 16, 32, 64, 128, 256}, o.quick ? 16 : 64);
    run_half(r, "cuda", *gpu, o.model_or("preset:llama-1b"), DType::q8_0, {1, 2, 4, 8, 16, 32, 64, 128, 256},
             o.quick ? 16 : 64, " (q8_0)");
  }
  r.axes("batch size B", "tokens/s (all sequences)", true, true);
  r.write(o.out_dir);
}

}  // namespace minfer::demo
