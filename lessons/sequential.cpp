// demo sequential: the autoregressive tax.
// 128 dependent [1, H] x [H, H] products (each needs the previous result: decode) against one
// [128, H] x [H, H] product (all rows known at once: prefill): the same FLOPs, but the first
// reads the weights 128 times and does 2 FLOPs per weight read, the second reads them once.
// Then the same inside the engine: 128 decode steps of a model against one 128-token prefill.
#include "engine/decoder.h"
#include "model/llama.h"
#include "lessons/demos.h"
#include "formats/model_files.h"

namespace minfer::demo {

namespace {

struct HalfResult {
  double chain_s, batch_s, decode_s, prefill_s;
};

HalfResult run_half(Backend& backend, int64_t H, const std::string& model_spec, DType dtype, int reps) {
  HalfResult result{};
  Tensor w = backend.empty({H, H}, DType::f32);
  backend.fill_uniform(w, 11, -1.0f / 32, 1.0f / 32);
  Tensor xs = backend.empty({129, H}, DType::f32);
  backend.fill_uniform(xs, 12, -1.0f, 1.0f);
  Tensor batch_out = backend.empty({128, H}, DType::f32);
  auto sync = [&] { backend.synchronize(); };
  result.chain_s = median_seconds(reps, [&] {
    for (int64_t i = 0; i < 128; ++i) backend.matmul(xs.slice(0, i + 1, i + 2), xs.slice(0, i, i + 1), w);
  }, sync);
  result.batch_s = median_seconds(reps, [&] { backend.matmul(batch_out, xs.slice(0, 0, 128), w); }, sync);

  LlamaOptions options;
  options.dtype = dtype;
  auto model = load_model(model_spec, backend, options);
  DecoderOptions dec;
  dec.n_ctx = 128;
  Decoder decoder(*model, dec);
  std::vector<int32_t> prompt(128);
  for (int i = 0; i < 128; ++i) prompt[i] = 3 + (i * 97) % 500;
  result.prefill_s = median_seconds(reps, [&] {
    decoder.reset();
    decoder.prefill({prompt});
  }, sync);
  result.decode_s = median_seconds(reps, [&] {
    decoder.reset();
    decoder.prefill({{prompt[0]}});
    for (int i = 1; i < 128; ++i) decoder.decode({prompt[i]});
  }, sync);
  return result;
}

void report_half(Report& r, const std::string& half, const HalfResult& x, int64_t H, const std::string& model) {
  const double flops = 128.0 * 2.0 * double(H) * double(H);
  print_table({half + ": 128 rows of [1," + std::to_string(H) + "] x [" + std::to_string(H) + "," + std::to_string(H) + "]",
               "ms", "GFLOP/s"},
              {{"128 dependent products (decode)", fmt("%.3f", x.chain_s * 1e3), fmt("%.1f", flops / x.chain_s / 1e9)},
               {"one [128, H] product (prefill)", fmt("%.3f", x.batch_s * 1e3), fmt("%.1f", flops / x.batch_s / 1e9)}});
  print_table({half + ": 128 tokens of " + model, "ms", "tokens/s"},
              {{"128 decode steps", fmt("%.2f", x.decode_s * 1e3), fmt("%.0f", 128 / x.decode_s)},
               {"one 128-token prefill", fmt("%.2f", x.prefill_s * 1e3), fmt("%.0f", 128 / x.prefill_s)}});
  r.bar(half, "128 dependent products", x.chain_s * 1e3);
  r.bar(half, "one batched product", x.batch_s * 1e3);
  r.bar(half, "128 decode steps", x.decode_s * 1e3);
  r.bar(half, "128-token prefill", x.prefill_s * 1e3);
  r.ran(half);
  r.conclude(half, fmt("the same FLOPs take %.1fx longer as 128 dependent products than as one batched product", x.chain_s / x.batch_s) +
                       fmt(", and the model needs %.1fx longer to decode 128 tokens one by one than to prefill them", x.decode_s / x.prefill_s) +
                       ": a dependent chain re-reads the weights for every row");
}

}  // namespace

void sequential(const Options& o) {
  Report r("sequential", "the autoregressive tax: 128 dependent steps against one batched pass");
  const int64_t H = o.quick ? 512 : 1024;
  const std::string cpu_model = o.model_or(o.quick ? "preset:tiny" : "preset:stories15M");
  auto cpu = cpu_backend(o);
  report_half(r, "cpu", run_half(*cpu, H, cpu_model, DType::f32, o.quick ? 3 : 5), H, cpu_model);
  if (!o.cuda) {
    r.skipped("cuda", "no CUDA device (" + o.cuda_reason + ")");
  } else {
    auto gpu = cuda_backend();
    const std::string gpu_model = o.model_or("preset:stories110M");
    report_half(r, "cuda", run_half(*gpu, 1024, gpu_model, DType::f16, 5), 1024, gpu_model);
  }
  r.axes("", "ms", false, true);
  r.write(o.out_dir);
}

}  // namespace minfer::demo
