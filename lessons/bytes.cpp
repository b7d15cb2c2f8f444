// demo bytes: decode speed is bytes per token against bandwidth. One model decodes one sequence
// with its weights stored as f32 (4 bytes a weight), f16 and bf16 (2) and q8_0 (34 bytes per 32
// weights: 1.0625). A decode step reads every weight once, so the ceiling is
//   tokens/s <= read bandwidth / bytes per step,
// and bytes per step is almost exactly the parameter count times bytes per weight (the norms, one
// embedding row and the KV cache read add little at short contexts). The measured points follow
// the ceiling down the bytes axis; how close they stay says how much of the step is the product
// of each weight with the activations, and how much is everything else (attention, element-wise
// ops, the conversion of 16- and 8-bit weights to arithmetic the core can do).
#include "engine/decoder.h"
#include "engine/roofline.h"
#include "lessons/demos.h"
#include "models/llama.h"
#include "models/llama_cost.h"

namespace minfer::demo {

namespace {

void run_half(Report& r, const std::string& half, Backend& backend, const std::string& spec,
              const std::vector<DType>& dtypes, int steps) {
  const Roofline roof = measure_roofline(backend, DType::f32);
  std::vector<std::vector<std::string>> rows;
  double f32_rate = 0, q8_rate = 0, worst = 1e9, best = 0;
  for (DType dtype : dtypes) {
    LlamaOptions options;
    options.dtype = dtype;
    auto model = LlamaModel::load(spec, backend, options);
    const LlamaConfig& c = model->config();
    DecoderOptions dec;
    dec.n_ctx = steps + 1;
    Decoder decoder(*model, dec);
    const double seconds = median_decode_seconds(decoder, backend, steps);
    const double rate = double(steps) / seconds;
    const uint64_t step_bytes = decode_step_bytes(c, dtype, decoder.cache().dtype(), 1, steps / 2);
    const double ceiling = roof.read_gbps * 1e9 / double(step_bytes);
    const double per_weight = double(dtype_block_bytes(dtype)) / double(dtype_block(dtype));
    r.point(half, "measured", per_weight, rate, dtype_name(dtype));
    r.point(half, "bandwidth / bytes per step", per_weight, ceiling);
    if (dtype == DType::f32) f32_rate = rate;
    if (dtype == DType::q8_0) q8_rate = rate;
    worst = std::min(worst, rate / ceiling);
    best = std::max(best, rate / ceiling);
    rows.push_back({dtype_name(dtype), fmt("%.4g", per_weight), fmt("%.1f", double(step_bytes) / 1e6), fmt("%.1f", rate),
                    fmt("%.1f", ceiling), fmt("%.0f%%", 100 * rate / ceiling),
                    f32_rate > 0 ? fmt("%.2fx", rate / f32_rate) : std::string("-")});
  }
  std::printf("%s: %s, one sequence, %d decode steps; ceilings measured: %s\n", half.c_str(), spec.c_str(), steps,
              roof.describe().c_str());
  print_table({"weights", "bytes/weight", "MB per step", "tokens/s", "bandwidth limit", "of limit", "vs f32"}, rows);
  r.ran(half);
  std::string text = fmt("decode reaches %.0f%%", 100 * worst) + fmt(" to %.0f%% of bandwidth / bytes per step", 100 * best);
  if (f32_rate > 0 && q8_rate > 0)
    text += fmt(" for every weight type; q8_0 reads 3.76x fewer bytes than f32 and decodes %.2fx faster", q8_rate / f32_rate);
  r.conclude(half, text);
}

}  // namespace

void bytes(const Options& o) {
  Report r("bytes", "decode tokens/s against bytes per weight, under bandwidth / bytes per step");
  auto cpu = cpu_backend(o);
  // stories110M: 438 MB of f32 weights, 116 MB as q8_0, both far beyond a 32 MiB L3. Quick:
  // stories42M, 168 MB and 45 MB.
  run_half(r, "cpu", *cpu, o.model_or(o.quick ? "preset:stories42M" : "preset:stories110M"),
           {DType::f32, DType::f16, DType::bf16, DType::q8_0}, o.quick ? 8 : 64);
  if (!o.cuda) {
    r.skipped("cuda", "no CUDA device (" + o.cuda_reason + ")");
  } else {
    auto gpu = cuda_backend();
    run_half(r, "cuda", *gpu, o.model_or("preset:llama-1b"), {DType::f32, DType::f16, DType::bf16, DType::q8_0},
             o.quick ? 16 : 128);
  }
  r.axes("bytes per weight", "tokens/s (one sequence)", false, true);
  r.write(o.out_dir);
}

}  // namespace minfer::demo
