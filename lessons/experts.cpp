// demo experts: what a mixture of experts reads. In a layer of experts a router picks k of E
// feed-forward experts for each token (model/naive_llama.cpp's mixture_of_experts). A decode step
// of one sequence therefore reads k of each layer's E experts: the bytes of a dense model of its
// active size. A step of B sequences reads the experts
// any of its rows chose; were the router uniform and each row's choice independent, that is
//   E (1 - (1 - k/E)^B) experts a layer      (LlamaConfig::expected_experts_read)
// which is k at B = 1 and approaches E: the batch then reads as many bytes as a dense model of the
// model's whole size, but each row still multiplies only its k experts, k/E of that model's
// arithmetic, so once the bytes stop being the limit (the batching lesson) it stays faster than
// that model. On the CPU each chosen expert is a product of its own: a step of one row makes 3k + 1
// products a layer (the router's too), where a dense model makes 2 with the fused kernels, and each
// has a fixed cost that a dense model of the same bytes does not pay (bench/results/NOTES.md: at
// B = 1 the two ran within 20% of each other on the Zen 3 VM, either ahead). The lesson measures, for B = 1, 2, 4, ... sequences:
//   - on the CPU, the distinct experts a step read in each layer (counted:
//     LlamaModel::count_expert_reads, which needs a host backend) beside the prediction;
//   - decode tokens/s of the mixture against two dense models of the same shape otherwise: one
//     whose feed-forward is as wide as the k experts a token takes (the same active size), and one
//     as wide as all E (the same total size);
//   - and on the CPU, a serving trace through the continuous scheduler (engine/serve_trace.h):
//     whatever the requests in flight, a pass's rows (decode rows and prompt chunks together)
//     decide how many experts it reads, so the passes of a busy server read most of them.
// The models are synthetic (seeded random weights, model/presets.h), in q8_0; the router's random
// rows spread the tokens over the experts about uniformly, the case the prediction assumes (a
// trained router is less even: a few experts take more of the tokens, and fewer distinct experts
// are read).
#include <algorithm>
#include <cmath>

#include "engine/decoder.h"
#include "engine/serve_trace.h"
#include "lessons/demos.h"
#include "model/llama.h"

namespace minfer::demo {

namespace {

// The mixture: 4 layers of 32 experts of width 512 (k = 4), dim 1024; q8_0 weights 230 MB, of
// which a token's 4 experts a layer are 27 MB (--quick: dim 512, 2 layers of 16 experts of width
// 128, for speed alone).
LlamaConfig mixture(bool quick) {
  LlamaConfig c;
  c.dim = quick ? 512 : 1024;
  c.n_layers = quick ? 2 : 4;
  c.n_heads = quick ? 8 : 16;
  c.n_kv_heads = quick ? 2 : 4;
  c.vocab_size = 4096;
  c.n_ctx = 256;
  c.n_experts = quick ? 16 : 32;
  c.n_experts_used = 4;
  c.expert_hidden_dim = quick ? 128 : 512;
  c.hidden_dim = c.expert_hidden_dim;  // unused: no layer is dense
  c.normalize_expert_weights = true;
  return c;
}

// The dense model of the mixture's shape whose feed-forward is `experts` experts wide.
LlamaConfig dense_of(const LlamaConfig& moe, int64_t experts) {
  LlamaConfig c = moe;
  c.n_experts = c.n_experts_used = c.expert_hidden_dim = 0;
  c.normalize_expert_weights = false;
  c.hidden_dim = experts * moe.expert_hidden_dim;
  return c;
}

struct Measured {
  double tokens_per_second;
  double experts_a_layer;  // distinct experts a step read in a layer; NaN where not counted
};

Measured decode(Backend& backend, LlamaModel& model, int64_t B, int steps) {
  DecoderOptions dec;
  dec.n_seqs = B;
  dec.n_ctx = steps + 1;
  Decoder decoder(model, dec);
  std::vector<int32_t> tokens(static_cast<size_t>(B));
  for (int64_t s = 0; s < B; ++s) tokens[size_t(s)] = static_cast<int32_t>((17 + 101 * s) % model.config().vocab_size);
  const bool experts = model.config().n_experts > 0 && backend.device() == DeviceKind::cpu;
  const double seconds = median_seconds(3, [&] {
    decoder.reset();
    if (experts) model.count_expert_reads(true);  // each run counts from zero: the last one's remain
    for (int i = 0; i < steps; ++i) decoder.decode(tokens);
  }, [&] { backend.synchronize(); });
  Measured m{double(B * steps) / seconds, NAN};
  if (experts) {
    const LlamaModel::ExpertReads& reads = model.expert_reads();
    m.experts_a_layer = double(reads.experts) / double(reads.passes) / double(model.config().n_layers);
    model.count_expert_reads(false);
  }
  return m;
}

// A trace of requests through the continuous scheduler on the mixture, counting what its passes read.
void serve_trace(Report& r, LlamaModel& model, const Options& o) {
  const LlamaConfig& c = model.config();
  TraceOptions t;
  t.n_requests = o.quick ? 8 : 48;
  t.prompt_min = 8;
  t.prompt_max = o.quick ? 32 : 96;
  t.output_min = 8;
  t.output_max = o.quick ? 16 : 96;
  SchedulerOptions so;
  so.slots = 16;
  so.n_ctx = t.prompt_max + t.output_max;
  so.max_queue = t.n_requests;
  Scheduler scheduler(model, so);
  model.count_expert_reads(true);
  const ServeRun run = replay(scheduler, make_trace(t, c.vocab_size, c.bos_id));
  const LlamaModel::ExpertReads reads = model.expert_reads();
  model.count_expert_reads(false);
  const double passes = double(std::max<uint64_t>(reads.passes, 1));
  const double rows = double(reads.rows) / passes, experts = double(reads.experts) / passes / double(c.n_layers);
  std::printf("cpu: %lld requests through 16 slots (prompts %lld-%lld, outputs %lld-%lld tokens): %.0f passes, "
              "%.1f rows a pass, %.1f of %lld experts read a layer a pass (%.1f predicted from each pass's rows), "
              "%.0f output tokens/s\n",
              static_cast<long long>(t.n_requests), static_cast<long long>(t.prompt_min),
              static_cast<long long>(t.prompt_max), static_cast<long long>(t.output_min),
              static_cast<long long>(t.output_max), passes, rows, experts, static_cast<long long>(c.n_experts),
              reads.predicted_experts / passes / double(c.n_layers), run.output_tokens_per_second());
  r.conclude("cpu", fmt("serving a trace, a pass carried %.1f rows on average", rows) +
                        fmt(" and read %.1f of each layer's ", experts) + std::to_string(c.n_experts) + " experts");
}

void run_half(Report& r, const std::string& half, Backend& backend, const Options& o) {
  const LlamaConfig moe = mixture(o.quick);
  LlamaOptions options;
  options.dtype = WeightTypes(DType::q8_0);
  LlamaModel mixture_model(backend, moe, "experts", options);
  LlamaModel active(backend, dense_of(moe, moe.n_experts_used), "dense, active size", options);
  LlamaModel total(backend, dense_of(moe, moe.n_experts), "dense, total size", options);
  const std::vector<int64_t> batches = o.quick ? std::vector<int64_t>{1, 4, 16} : std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64};
  const int steps = o.quick ? 4 : 24;
  std::vector<std::vector<std::string>> rows;
  double first_ratio = 0.0, last_ratio = 0.0, last_experts = 0.0;
  for (int64_t B : batches) {
    const Measured m = decode(backend, mixture_model, B, steps);
    const Measured a = decode(backend, active, B, steps);
    const Measured t = decode(backend, total, B, steps);
    const double predicted = moe.expected_experts_read(B);
    r.point(half, "mixture of experts", double(B), m.tokens_per_second);
    r.point(half, "dense, its active size", double(B), a.tokens_per_second);
    r.point(half, "dense, its total size", double(B), t.tokens_per_second);
    rows.push_back({std::to_string(B), std::isnan(m.experts_a_layer) ? "-" : fmt("%.1f", m.experts_a_layer), fmt("%.1f", predicted),
                    fmt("%.0f", m.tokens_per_second), fmt("%.0f", a.tokens_per_second), fmt("%.0f", t.tokens_per_second)});
    if (B == batches.front()) first_ratio = m.tokens_per_second / a.tokens_per_second;
    last_ratio = m.tokens_per_second / t.tokens_per_second;
    last_experts = m.experts_a_layer;
  }
  std::printf("%s: %s, q8_0 weights; %lld steps a point\n", half.c_str(), moe.describe().c_str(), static_cast<long long>(steps));
  print_table({"B", "experts read a layer", "predicted (uniform router)", "mixture tokens/s", "dense, active size",
               "dense, total size"},
              rows);
  r.ran(half);
  const std::string first = fmt("at B = 1 the mixture decodes at %.2fx the speed of a dense model of its active size",
                                first_ratio);
  if (std::isnan(last_experts)) {  // a device's experts are not counted (its ids stay on the device)
    r.conclude(half, first + fmt("; at B = %.0f it decodes at ", double(batches.back())) +
                         fmt("%.2fx a dense model of its total size", last_ratio));
    return;
  }
  r.conclude(half, first + fmt("; at B = %.0f its steps read ", double(batches.back())) +
                       fmt("%.1f of each layer's ", last_experts) + std::to_string(moe.n_experts) +
                       fmt(" experts, about the bytes of a dense model of its total size, and it decodes at %.2fx that "
                           "model's speed: its rows multiply only their own experts", last_ratio));
  serve_trace(r, mixture_model, o);
}

}  // namespace

void experts(const Options& o) {
  Report r("experts", "a mixture of experts: experts read a step and decode tokens/s against batch size");
  auto cpu = cpu_backend(o);
  run_half(r, "cpu", *cpu, o);
  // note: CUDA's expert product groups a step's rows by expert on the device, as the CPU's does, but
  // the ids stay there, so its experts read are only predicted.
  if (!o.cuda) {
    r.skipped("cuda", "no CUDA device (" + o.cuda_reason + ")");
  } else {
    auto gpu = cuda_backend();
    run_half(r, "cuda", *gpu, o);
  }
  r.axes("sequences B", "decode tokens/s (all sequences)", true, true);
  r.write(o.out_dir);
}

}  // namespace minfer::demo
