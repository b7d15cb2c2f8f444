// `minfer bench`: prefill and decode throughput in the manner of llama.cpp's llama-bench, with
// the limit beside every figure.
//
// A ppP test prefills B prompts of P tokens in batched passes of up to 4096 rows; a
// tgN test decodes N tokens for each of B sequences, a forward pass over B rows per step,
// starting from an empty cache, or with -d D from a cache that holds D positions already (a prompt
// prefilled before each repetition, untimed: llama-bench's -d, "tg128 @ d2048"). Each test runs once to warm up and then -r times; the figure is
// the mean +- standard deviation of the per-repetition tokens/s (B x P or B x N tokens over the
// repetition's time). Tokenisation and sampling are not involved: prompts are fixed pseudo-random
// ids and decode feeds fixed ids.
//
// Beside each figure: for decode the bytes one step reads (every weight matrix once, of a mixture
// of experts the experts its rows chose, counted on the CPU and predicted on CUDA, plus the KV
// cache read so far, averaged over the steps; model/llama_cost.h) and the achieved GB/s; for
// prefill the FLOPs and the achieved GFLOP/s. With --roofline the read bandwidth of every memory
// level and the matmul peak are measured first (engine/roofline.h): a decode row is given as a
// fraction of the level its bytes per step fit in ("= 62% of L3 61.0"), a prefill row as a
// fraction of the peak, and a row over 100% says why.
//
// With --draft (a draft model, or ngram for prompt lookup), each tgN is also timed as greedy
// generation of N tokens after a fixed 16-token prompt (engine/speculative.h): once plainly
// ("draft none") and once per --draft-k with speculation; these rows give decode tokens/s, tokens
// per target pass and the acceptance rate (the model's own tokens are fed, so they are not fixed).
#include <algorithm>
#include <chrono>
#include <optional>
#include <cstdio>
#include <vector>

#include "engine/communicator.h"
#include "engine/decoder.h"
#include "engine/speculative.h"
#include "core/error.h"
#include "core/files.h"
#include "engine/profiler.h"
#include "engine/roofline.h"
#include "model/llama_cost.h"
#include "model/presets.h"
#include "cli/bench_report.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "formats/model_files.h"

namespace minfer::cli {

namespace {

constexpr const char* kDramBoundSpec = "preset:dram-bound";
constexpr int64_t kGenerationPrompt = 16;  // the prompt of --draft's generation rows

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct Settings {
  std::vector<std::string> models;
  std::vector<int64_t> prompts, gens, batches, threads;
  std::vector<std::string> dtypes, kernels, graphs;
  int reps = 5;
  BackendKind device = BackendKind::cpu;
  std::string output;
  bool roofline = false;
  int64_t depth = 0;             // -d: positions prefilled, untimed, before each ppP and tgN
  bool explicit_prompt = false;  // -p given: a prompt longer than a model's context is an error
  bool profile = false;          // time every op and print where each test spent its time
  std::optional<DType> kv_dtype;  // --kv-dtype; unset: the decoder's default for the device
  BackendOptions backend;
  std::string draft;              // --draft: empty, "ngram" or a draft model
  std::optional<WeightTypes> draft_dtype;
  std::vector<int64_t> draft_ks;
};

// Runs `setup` and `body` once to warm up and then `reps` times; returns the seconds of each timed
// body (setup is untimed).
template <class Setup, class Body>
std::vector<double> time_reps(Backend& backend, int reps, Setup&& setup, Body&& body) {
  setup();
  body();
  backend.synchronize();
  std::vector<double> seconds;
  for (int r = 0; r < reps; ++r) {
    setup();
    backend.synchronize();
    auto start = std::chrono::steady_clock::now();
    body();
    backend.synchronize();
    seconds.push_back(seconds_since(start));
  }
  return seconds;
}

class Bench {
 public:
  explicit Bench(Settings settings) : s_(std::move(settings)) {}

  std::vector<BenchRow> run() {
    if (s_.output == "md") print_markdown_header(stdout);
    if (s_.output == "csv") print_csv_header(stdout);
    for (const std::string& spec : s_.models)
      for (const std::string& dtype : s_.dtypes)
        for (int64_t threads : s_.threads)
          run_model(spec, dtype == "auto" ? std::nullopt : WeightTypes::parse(dtype), static_cast<int>(threads));
    return rows_;
  }

 private:
  void run_model(const std::string& spec, const std::optional<WeightTypes>& dtype, int threads) {
    BackendOptions options = s_.backend;
    options.threads = threads;
    const BackendKind kind = s_.device;
    std::unique_ptr<Backend> backend = make_backend(kind, options);
    LlamaOptions model_options;
    model_options.dtype = dtype;
    model_options.communicator = split_communicator();
    std::unique_ptr<ProfilingBackend> profiler;
    if (s_.profile) profiler = std::make_unique<ProfilingBackend>(*backend);
    Backend& runner = profiler ? static_cast<Backend&>(*profiler) : *backend;
    const std::string model_spec = resolve_spec(spec, *backend);
    auto model = load_model(model_spec, runner, model_options);
    std::unique_ptr<LlamaModel> draft;
    if (!s_.draft.empty() && s_.draft != "ngram") {
      LlamaOptions draft_options;
      draft_options.dtype = s_.draft_dtype;
      draft_options.communicator = split_communicator();
      draft = load_draft_model(s_.draft, draft_options, runner, model->info());
      draft_label_ = std::string(dtype_name(draft->info().dtype)) + " model";
    }
    roofline_.reset();
    if (s_.roofline) {
      roofline_ = measure_roofline(*backend, model->info().dtype);
      std::fprintf(stderr, "minfer: roofline on %s: %s\n", backend->name().c_str(), roofline_->describe().c_str());
      std::fprintf(stderr, "minfer: streaming reads by working set: %s\n", roofline_->describe_curve().c_str());
    }
    const LlamaConfig& config = model->config();
    std::vector<int64_t> prompts = s_.prompts;
    for (auto& p : prompts) {
      if (p > config.n_ctx && !s_.explicit_prompt) {
        std::fprintf(stderr, "minfer: %s has a context of %lld: pp%lld becomes pp%lld\n", spec.c_str(),
                     static_cast<long long>(config.n_ctx), static_cast<long long>(p),
                     static_cast<long long>(config.n_ctx));
        p = config.n_ctx;
      }
      MINFER_CHECK(p <= config.n_ctx, "-p ", p, " exceeds the context of ", spec, " (", config.n_ctx, ")");
    }
    for (int64_t n : s_.gens)
      MINFER_CHECK(n <= config.n_ctx, "-n ", n, " exceeds the context of ", spec, " (", config.n_ctx, ")");
    MINFER_CHECK(s_.depth == 0 || s_.draft.empty(), "-d is for ppP and tgN rows, not --draft's generation rows");
    int64_t n_ctx = 1;
    for (int64_t p : prompts) n_ctx = std::max(n_ctx, p);
    for (int64_t n : s_.gens)
      n_ctx = std::max(n_ctx, s_.draft.empty() ? n : std::min(config.n_ctx, kGenerationPrompt + n));
    n_ctx += s_.depth;
    MINFER_CHECK(n_ctx <= config.n_ctx, "-d ", s_.depth, " and the longest test need ", n_ctx,
                 " positions, more than the context of ", spec, " (", config.n_ctx, ")");

    // CUDA Graphs apply to CUDA decode only; CPU rows carry an empty "graphs".
    const std::vector<std::string> graph_modes =
        kind == BackendKind::cuda ? s_.graphs : std::vector<std::string>{""};
    BenchRow base;
    base.model = model_spec;
    base.n_params = config.n_params();
    base.model_bytes = model->info().weight_bytes;
    base.device = backend_kind_name(kind);
    base.device_name = backend->name();
    base.dtype = dtype && dtype->is_k_mix() ? dtype->name() : std::string(dtype_name(model->info().dtype));
    base.threads = backend->cpu_threads();
    base.ranks = model->split() != nullptr ? model->ranks()->size() : 1;
    base.gemm = gemm_name(options.gemm);
    base.build_commit = build_commit();
    for (const std::string& kernels : s_.kernels) {
      for (const std::string& graphs : graph_modes) {
        model->set_kernels(kernels == "fused" ? Kernels::fused : Kernels::unfused);
        if (!graphs.empty()) backend->set_recording(graphs == "on");
        base.kernels = kernels;
        base.graphs = graphs;
        for (int64_t B : s_.batches) {
          base.batch = B;
          run_batch(base, *backend, *model, draft.get(), prompts, n_ctx, profiler.get());
        }
      }
    }
  }

  void run_batch(BenchRow base, Backend& backend, LlamaModel& model, LlamaModel* draft_model,
                 const std::vector<int64_t>& prompts, int64_t n_ctx, ProfilingBackend* profiler) {
    const int64_t B = base.batch;
    DecoderOptions dec;
    dec.n_seqs = B;
    dec.n_ctx = n_ctx;
    dec.pass_rows = std::min<int64_t>(4096, std::max<int64_t>(B * n_ctx, B));
    dec.kv_dtype = s_.kv_dtype;
    if (!s_.draft.empty()) dec.logits_per_seq = *std::max_element(s_.draft_ks.begin(), s_.draft_ks.end()) + 1;
    Decoder decoder(model, dec);
    std::unique_ptr<Decoder> draft;
    if (draft_model) draft = std::make_unique<Decoder>(*draft_model, draft_decoder_options(dec));
    base.kv_dtype = dtype_name(decoder.cache().dtype());
    if (roofline_ && model.split() != nullptr) base.roofline_all_reduce_seconds = communication_row(model, B);
    for (int64_t p : prompts) {
      if (p <= 0) continue;
      if (profiler) profiler->reset();
      finish(prefill_row(base, backend, decoder, model, p), profiler);
    }
    for (int64_t n : s_.gens) {
      if (n <= 0) continue;
      if (profiler) profiler->reset();
      finish(decode_row(base, backend, decoder, model, n), profiler);
      if (s_.draft.empty() || n < 2) continue;  // a generation row times tokens after the first
      finish(generation_row(base, decoder, nullptr, n, 0), profiler);
      for (int64_t k : s_.draft_ks) finish(generation_row(base, decoder, draft.get(), n, k), profiler);
    }
  }

  // Greedy generation of N tokens for each sequence after a fixed prompt: plainly (k = 0), or
  // speculatively with k drafts per round from `draft` (nullptr: prompt lookup).
  BenchRow generation_row(BenchRow row, Decoder& target, Decoder* draft, int64_t N, int64_t k) {
    const int64_t B = target.n_seqs(), vocab = target.vocab_size();
    const int64_t P = std::min(kGenerationPrompt, target.n_ctx() - N + 1);
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(B));
    for (int64_t s = 0; s < B; ++s)
      for (int64_t i = 0; i < P; ++i) prompts[s].push_back(static_cast<int32_t>((s * 7919 + i * 104729 + 1) % vocab));
    GenerateOptions gen;
    gen.n_new = N;
    gen.stop_at_eos = false;
    std::unique_ptr<SpeculativeDecoder> speculative;
    if (k > 0) {
      SpeculativeOptions options;
      options.k = k;
      speculative = std::make_unique<SpeculativeDecoder>(target, draft, options);
    }
    GenerateResult result;
    for (int rep = 0; rep <= s_.reps; ++rep) {  // the first is the warm-up
      result = speculative ? speculative->generate(prompts, gen) : target.generate(prompts, gen);
      if (rep > 0) row.samples_ts.push_back(double(result.decode_tokens) / result.decode_seconds);
    }
    mean_stddev(row.samples_ts, &row.avg_ts, &row.stddev_ts);
    row.test = "tg" + std::to_string(N);
    row.n_prompt = P;
    row.n_gen = N;
    row.draft = k == 0 ? "none" : (draft ? draft_label_ : "ngram") + ", k=" + std::to_string(k);
    row.acceptance = result.drafted_tokens > 0 ? double(result.accepted_tokens) / double(result.drafted_tokens) : 0.0;
    row.tokens_per_pass = double(result.decode_tokens) / double(std::max<int64_t>(result.decode_steps, 1));
    return row;
  }

  // An empty cache, then -d positions of every sequence prefilled (fixed pseudo-random ids).
  void start_at_depth(Decoder& decoder, const LlamaConfig& c) const {
    decoder.reset();
    if (s_.depth == 0) return;
    std::vector<std::vector<int32_t>> context(static_cast<size_t>(decoder.n_seqs()));
    for (size_t s = 0; s < context.size(); ++s)
      for (int64_t i = 0; i < s_.depth; ++i) context[s].push_back(static_cast<int32_t>((s * 131 + i * 7907 + 5) % c.vocab_size));
    decoder.prefill(context);
  }
  std::string depth_suffix() const { return s_.depth > 0 ? " @ d" + std::to_string(s_.depth) : ""; }

  BenchRow prefill_row(BenchRow row, Backend& backend, Decoder& decoder, const LlamaModel& model, int64_t P) {
    const LlamaConfig& c = model.config();
    const int64_t B = decoder.n_seqs();
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(B));
    for (int64_t s = 0; s < B; ++s)
      for (int64_t i = 0; i < P; ++i)
        prompts[s].push_back(static_cast<int32_t>((s * 7919 + i * 104729) % c.vocab_size));
    std::vector<double> seconds = time_reps(backend, s_.reps, [&] { start_at_depth(decoder, c); },
                                            [&] { decoder.prefill(prompts); });
    row.test = "pp" + std::to_string(P) + depth_suffix();
    row.n_prompt = P;
    row.n_depth = s_.depth;
    for (double t : seconds) row.samples_ts.push_back(double(B * P) / t);
    mean_stddev(row.samples_ts, &row.avg_ts, &row.stddev_ts);
    const double passes_per_second = row.avg_ts / double(B * P);
    row.bytes_per_step = decode_step_bytes(model.info(), c, decoder.cache().dtype(), B, s_.depth + P - 1);
    row.gbps = double(row.bytes_per_step) * passes_per_second / 1e9;
    row.gflops = double(prefill_flops(c, B, P)) * passes_per_second / 1e9;
    return row;
  }

  BenchRow decode_row(BenchRow row, Backend& backend, Decoder& decoder, LlamaModel& model, int64_t N) {
    const LlamaConfig& c = model.config();
    const int64_t B = decoder.n_seqs();
    std::vector<int32_t> tokens(static_cast<size_t>(B));
    for (int64_t s = 0; s < B; ++s) tokens[s] = static_cast<int32_t>((3 + s * 31) % c.vocab_size);
    // A mixture of experts on a host backend counts the experts its steps read (each repetition
    // starts the counts again, so the last one's N steps remain); elsewhere they are predicted
    // (model/llama_cost.h).
    const bool count = c.n_experts > 0 && backend.device() == DeviceKind::cpu;
    Communicator& ranks = model.ranks() != nullptr ? *model.ranks() : world_communicator();  // NCCL's on a GPU
    std::vector<double> seconds = time_reps(backend, s_.reps, [&] { start_at_depth(decoder, c); }, [&] {
      if (count) model.count_expert_reads(true);
      ranks.reset_stats();  // the last repetition's N steps remain
      for (int64_t i = 0; i < N; ++i) decoder.decode(tokens);
    });
    std::optional<uint64_t> experts_read;
    if (count) experts_read = model.expert_reads().bytes / std::max<uint64_t>(model.expert_reads().passes, 1);
    if (count) model.count_expert_reads(false);
    row.test = "tg" + std::to_string(N) + depth_suffix();
    row.n_gen = N;
    row.n_depth = s_.depth;
    for (double t : seconds) row.samples_ts.push_back(double(B * N) / t);
    mean_stddev(row.samples_ts, &row.avg_ts, &row.stddev_ts);
    uint64_t bytes = 0, flops = 0;
    for (int64_t pos = s_.depth; pos < s_.depth + N; ++pos) {
      bytes += decode_step_bytes(model.info(), c, decoder.cache().dtype(), B, pos, experts_read);
      flops += decode_step_flops(c, B, pos);
    }
    row.bytes_per_step = bytes / uint64_t(N);
    const double steps_per_second = row.avg_ts / double(B);
    row.gbps = double(row.bytes_per_step) * steps_per_second / 1e9;
    row.gflops = double(flops) / double(N) * steps_per_second / 1e9;
    if (model.split() != nullptr) count_all_reduces(&row, ranks, N);
    return row;
  }

  // Split over ranks: a decode step's all-reduces (this rank's, of the last repetition), kept in
  // the row and printed beside the step's time and the bytes of weights this rank read.
  static void count_all_reduces(BenchRow* row, const Communicator& ranks, int64_t N) {
    const CommunicatorStats& stats = ranks.stats();
    row->all_reduces_per_step = double(stats.all_reduces) / double(N);
    row->all_reduce_bytes_per_step = double(stats.all_reduce_bytes) / double(N);
    row->all_reduce_seconds_per_step = stats.all_reduce_seconds / double(N);
    const double step_ms = 1e3 * double(row->batch) / row->avg_ts, reduce_ms = 1e3 * row->all_reduce_seconds_per_step;
    std::fprintf(stderr,
                 "minfer: %s over ranks: %.1f all-reduces a step, %.1f KiB in all, %.3f ms of the step's %.3f ms "
                 "(%.0f%%), beside %s of this rank's weights and cache\n",
                 row->test.c_str(), row->all_reduces_per_step, row->all_reduce_bytes_per_step / 1024.0, reduce_ms,
                 step_ms, 100.0 * reduce_ms / step_ms, format_bytes(row->bytes_per_step).c_str());
  }

  // --roofline over ranks: the ceiling's communication row, an all-reduce of a step's B rows of dim,
  // measured between the ranks and printed beside the step's count of them (two a layer).
  static double communication_row(LlamaModel& model, int64_t B) {
    const LlamaConfig& c = model.full_config();
    Communicator& ranks = *model.ranks();
    const double seconds = measure_all_reduce_seconds(ranks, model.backend(), B * c.dim);
    std::fprintf(stderr,
                 "minfer: roofline, communication: an all-reduce of %.1f KiB (%lld x %lld f32) takes %.1f us between %d ranks; "
                 "a decode step's %lld: %.3f ms\n",
                 double(B * c.dim) * 4 / 1024, static_cast<long long>(B), static_cast<long long>(c.dim),
                 1e6 * seconds, ranks.size(), static_cast<long long>(2 * c.n_layers), 1e3 * seconds * double(2 * c.n_layers));
    return seconds;
  }

  // "preset:dram-bound": stories110M's shape with as many layers as make its weights, in the
  // smallest dtype asked for, 4x the device's last cache (engine/roofline.h), so every decode
  // step streams from main memory; any other spec as it is.
  std::string resolve_spec(const std::string& spec, Backend& backend) const {
    if (spec != kDramBoundSpec) return spec;
    DType smallest = DType::f32;
    for (const std::string& d : s_.dtypes) {
      const DType dtype = d == "auto" ? DType::f32 : WeightTypes::parse(d)->base;
      if (dtype_bytes_per_element(dtype) < dtype_bytes_per_element(smallest)) smallest = dtype;
    }
    const uint64_t last_cache = last_cache_bytes(device_memory_levels(backend));
    const Preset preset = preset_at_least("stories110M", kMainOverLastCache * last_cache, smallest);
    std::fprintf(stderr, "minfer: %s is preset:%s here: %.2f GB of %s weights, %llux the last cache of %s (%.0f MiB)\n",
                 spec.c_str(), preset.name.c_str(), double(LlamaModel::weight_bytes(preset.config, smallest)) / 1e9,
                 dtype_name(smallest), static_cast<unsigned long long>(kMainOverLastCache), backend.name().c_str(),
                 double(last_cache) / double(1 << 20));
    return "preset:" + preset.name;
  }

  // The ceiling each row is compared with: the memory level that holds a decode step's bytes,
  // or the matmul peak for prefill; and why, where the row reads over it.
  void judge(BenchRow& row) const {
    if (!roofline_ || row.generation()) return;
    row.roofline_levels = roofline_->levels;
    row.roofline_gflops = roofline_->peak_gflops;
    if (row.decode()) {
      const MemoryLevel& level = roofline_->level_for(row.bytes_per_step);
      row.roofline_gbps = level.read_gbps;
      row.roofline_level = level.name;
      row.roofline_level_bytes = level.capacity_bytes;
      row.over_reason = over_ceiling_reason(*roofline_, row.bytes_per_step, row.gbps);
    } else if (row.gflops > row.roofline_gflops) {
      row.over_reason = "over: faster than the peak's best; this product's shape runs faster than the peak's shapes, "
                        "or the probe met a busier machine";
    }
  }

  void finish(BenchRow row, const ProfilingBackend* profiler) {
    judge(row);
    if (s_.output == "md") print_markdown_row(stdout, row);
    if (s_.output == "csv") print_csv_row(stdout, row);
    if (profiler != nullptr)
      std::fprintf(stderr, "\nminfer: where %s at B=%lld spent its time (warm-up and repetitions):\n%s\n",
                   row.test.c_str(), static_cast<long long>(row.batch), profiler->report().c_str());
    rows_.push_back(std::move(row));
  }

 private:
  Settings s_;
  std::vector<BenchRow> rows_;
  std::optional<Roofline> roofline_;  // of the model being measured, with --roofline
  std::string draft_label_;           // "q8_0 model": the draft model's weights, for its rows
};

}  // namespace

int cmd_bench(int argc, char** argv) {
  Args args("bench", "Measures prefill (ppP) and decode (tgN) throughput, with the roofline beside each figure.",
            {{"-m,--model", "MODEL", "a model file or folder, or preset:NAME; repeatable (default preset:stories15M)", true},
             {"-p,--n-prompt", "LIST", "prompt lengths, e.g. 512 or 128,512; 0 skips prefill (default 512)"},
             {"-d,--depth", "D", "positions already in the cache before each ppP and tgN, prefilled untimed (default 0)"},
             {"-n,--n-gen", "LIST", "generated tokens, e.g. 128; 0 skips decode (default 128)"},
             {"-B,--batch", "LIST", "parallel sequences: 1,4,16 or 1-4 (default 1)"},
             {"-r,--repetitions", "N", "timed repetitions after one warm-up (default 5)"},
             {"-t,--threads", "LIST", "CPU threads, 1 to 1024 each, e.g. 1,2 (default: every core)"},
             {"--device", "DEV", "ref, cpu, cuda or auto (default auto)"},
             {"--dtype", "LIST", "weights: auto (as stored; f32 for presets), f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,\n"
                                 "                              presets also q2_k .. q6_k, q4_k_m and q5_k_m (default auto)"},
             {"--kernels", "LIST", "fused, unfused or fused,unfused (default fused); on cpu and cuda also\n"
                                   "                              attention's algorithm: fused the online softmax, unfused three passes"},
             {"--kv-dtype", "TYPE", "the KV cache: f32, f16 or bf16 (default: f32 on the CPU; on CUDA the weights' type, f16 for quantized weights)"},
             {"--gemm", "KIND", "CUDA matrix products: cublas, naive, tiled, mma (default cublas)"},
             {"--graphs", "LIST", "CUDA: on, off or on,off: decode steps as CUDA Graphs (default on)"},
             {"--spin-us", "US", "microseconds idle CPU workers spin before sleeping (default 200)"},
             {"--batch-invariant", "", "CPU: every row of a product with f32/f16/bf16 (or unpacked quantized) weights\n"
                                       "                              computed as a lone row; packed weights are without it (docs/serving.md)"},
             {"--roofline", "", "measure each memory level's read bandwidth and the matmul peak first; rows show % of theirs"},
             {"--profile", "", "time every op (serialising the device) and print a table per test"},
             {"--draft", "MODEL", "also time greedy generation of each -n plainly and with speculative decoding:\n"
                                  "                              a draft model (same vocabulary), or ngram for prompt lookup"},
             {"--draft-dtype", "TYPE", "the draft model's weights, as --dtype takes them (default: as stored)"},
             {"--draft-k", "LIST", "tokens drafted per round, 1 to 16 each, e.g. 2,4,8 (default 4)"},
             {"-o,--output", "FMT", "md, csv or json (default md)"},
             {"--save-json", "PATH", "also write the JSON records to PATH"}});
  args.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::printf("%s", args.usage().c_str());
    return 0;
  }
  Settings s;
  s.models = args.get_all("-m");
  if (s.models.empty()) s.models = {"preset:stories15M"};
  s.prompts = parse_int_list(args.get("-p", "512"), "-p", 0, 1 << 20);
  s.gens = parse_int_list(args.get("-n", "128"), "-n", 0, 1 << 20);
  MINFER_CHECK(std::any_of(s.prompts.begin(), s.prompts.end(), [](int64_t p) { return p > 0; }) ||
                   std::any_of(s.gens.begin(), s.gens.end(), [](int64_t n) { return n > 0; }),
               "nothing to measure: every -p and -n is 0");
  s.batches = parse_int_list(args.get("-B", "1"), "-B", 1, 4096);
  s.threads = parse_int_list(args.get("-t", std::to_string(ThreadPool::hardware_threads())), "-t", 1, 1024);
  s.reps = static_cast<int>(args.get_int("-r", 5, 1, 1000));
  s.device = parse_backend_kind(args.get("--device", "auto"));
  check_backend_options(args, s.device);
  s.dtypes = parse_list(args.get("--dtype", "auto"), "--dtype");
  for (const auto& d : s.dtypes)
    MINFER_CHECK(d == "auto" || WeightTypes::parse(d),
                 "--dtype: weights are auto, f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1 or (presets) q2_k .. q6_k, q4_k_m, "
                 "q5_k_m");
  s.kernels = parse_list(args.get("--kernels", "fused"), "--kernels");
  for (const auto& k : s.kernels) MINFER_CHECK(k == "fused" || k == "unfused", "--kernels: '", k, "' is not fused or unfused");
  s.output = args.get("-o", "md");
  MINFER_CHECK(s.output == "md" || s.output == "csv" || s.output == "json", "-o: '", s.output, "' is not md, csv or json");
  s.roofline = args.has("--roofline");
  s.backend.gemm = parse_gemm(args.get("--gemm", "cublas"));
  s.graphs = parse_list(args.get("--graphs", "on"), "--graphs");
  for (const auto& g : s.graphs) parse_on_off(g, "--graphs");
  s.backend.spin_us = static_cast<int>(args.get_int("--spin-us", s.backend.spin_us, 0, 1000000));
  s.backend.batch_invariant = args.has("--batch-invariant");
  s.explicit_prompt = args.has("-p");
  s.depth = args.get_int("-d", 0, 0, 1 << 20);
  s.profile = args.has("--profile");
  s.kv_dtype = kv_dtype_option(args);
  s.draft = args.get("--draft", "");
  MINFER_CHECK(args.has("--draft") || !(args.has("--draft-k") || args.has("--draft-dtype")),
               "--draft-k and --draft-dtype need --draft MODEL or --draft ngram");
  MINFER_CHECK(!(s.draft == "ngram" && args.has("--draft-dtype")), "--draft-dtype needs a draft model, not ngram");
  s.draft_dtype = weights_dtype_option(args, "--draft-dtype");
  s.draft_ks = parse_int_list(args.get("--draft-k", "4"), "--draft-k", 1, 16);
  MINFER_CHECK(s.draft.empty() || std::any_of(s.gens.begin(), s.gens.end(), [](int64_t n) { return n > 1; }),
               "--draft times generation: give an -n of at least 2");
  if (args.has("--save-json")) check_output_path(args.get("--save-json"), "--save-json");  // before the work
  Bench bench(s);
  std::vector<BenchRow> rows = bench.run();
  std::string json = to_json(rows);
  if (s.output == "json") std::fputs(json.c_str(), stdout);
  if (args.has("--save-json")) write_file_atomic(args.get("--save-json"), json);
  return 0;
}

}  // namespace minfer::cli
