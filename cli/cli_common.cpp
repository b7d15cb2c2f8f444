#include "cli/cli_common.h"

#include "engine/communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "core/device.h"
#include "core/error.h"
#include "core/files.h"
#include "formats/model_files.h"

namespace minfer::cli {

std::vector<Option> engine_options() {
  return {
      {"-m,--model", "MODEL", "a model: a Hugging Face folder, a .safetensors or .gguf file, a llama2.c\n"
                              "                              checkpoint, or preset:NAME (required)"},
      {"--device", "DEV", "ref, cpu, cuda or auto (default auto: cuda when a GPU is present); ref runs the\n                              plain-loop reference kernels, slowly"},
      {"--dtype", "TYPE", "weights as f32, f16, bf16, q8_0, q4_0, q4_1, q5_0 or q5_1, quantized at load;\n"
                          "                              presets also q2_k .. q6_k and llama-quantize's q4_k_m and q5_k_m\n"
                          "                              mixes (random blocks) (default: as the model\n"
                          "                              stores them, e.g. a GGUF file's Q4_K_M mix; f32 for llama2.c files\n"
                          "                              and presets)"},
      {"--threads", "N", "CPU threads, 1 to 1024 (default: every core)"},
      {"--spin-us", "US", "microseconds idle CPU workers spin before sleeping (default 200)"},
      {"--batch-invariant", "", "CPU: compute every row of a product with f32, f16 or bf16 weights (and quantized\n"
                                "                              types this build does not pack) as a lone row, so greedy answers do\n"
                                "                              not depend on how prompts are split into passes or batched; prefill\n"
                                "                              is slower. Packed quantized weights are so without it (docs/serving.md)"},
      {"--kernels", "KIND", "fused or unfused (default fused); on cpu and cuda also attention's algorithm: fused\n"
                            "                              the online softmax, unfused three passes"},
      {"--kv-dtype", "TYPE", "the KV cache as f32, f16 or bf16 (default: f32 on the CPU; on CUDA the weights'\n"
                             "                              type, f16 for quantized weights); bf16 on CUDA and ref, not cpu"},
      {"--gemm", "KIND", "CUDA matrix products: cublas, naive, tiled or mma (default cublas)"},
      {"--graphs", "ON|OFF", "CUDA: replay decode steps as CUDA Graphs (default on)"},
  };
}

bool parse_on_off(const std::string& value, const std::string& option) {
  MINFER_CHECK(value == "on" || value == "off", option, ": '", value, "' is not on or off");
  return value == "on";
}

void check_backend_options(const Args& args, BackendKind kind) {
  for (const char* option : {"--gemm", "--graphs"})
    if (args.declared(option) && args.has(option) && kind != BackendKind::cuda)
      fail(option, " applies to CUDA only; it does nothing on the ", backend_kind_name(kind), " device");
  for (const char* option : {"--threads", "--spin-us", "--batch-invariant"})
    if (args.declared(option) && args.has(option) && kind != BackendKind::cpu)
      fail(option, " applies to the CPU backend only; it does nothing on the ", backend_kind_name(kind), " device");
}

BackendOptions backend_options(const Args& args) {
  BackendOptions options;
  options.threads = static_cast<int>(args.get_int("--threads", 0, 1, 1024));
  options.spin_us = static_cast<int>(args.get_int("--spin-us", options.spin_us, 0, 1000000));
  options.gemm = parse_gemm(args.get("--gemm", "cublas"));
  options.graphs = parse_on_off(args.get("--graphs", "on"), "--graphs");
  options.batch_invariant = args.declared("--batch-invariant") && args.has("--batch-invariant");
  // Under mpirun each rank takes a GPU of its own: its index among the ranks on its machine
  // (OpenMPI's local rank; MPICH's or Slurm's), modulo the GPUs there, so ranks outnumbering the
  // GPUs would share them (which the NCCL communicator refuses, naming the ranks).
  const char* local_rank = nullptr;
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (local_rank == nullptr) local_rank = std::getenv(name);
  std::string reason;
  const int gpus = local_rank != nullptr ? cuda_device_count(&reason) : 0;
  if (gpus > 0) options.cuda_device = std::atoi(local_rank) % gpus;
  return options;
}

uint64_t seed_option(const Args& args) {
  if (args.has("--seed")) return static_cast<uint64_t>(args.get_int("--seed", 1, 1, INT64_MAX));
  uint64_t seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) | 1;
  Communicator& world = world_communicator();
  if (world.size() > 1) {  // every rank must sample alike: rank 0's clock
    const Tensor t = Tensor::wrap(&seed, {2}, DType::i32, DeviceKind::cpu);  // its 8 bytes
    world.broadcast(t, 0);
  }
  return seed;
}

std::optional<DType> kv_dtype_option(const Args& args) {
  if (!args.declared("--kv-dtype") || !args.has("--kv-dtype")) return std::nullopt;
  const std::string name = args.get("--kv-dtype");
  MINFER_CHECK(name == "f32" || name == "f16" || name == "bf16", "--kv-dtype: '", name, "' is not f32, f16 or bf16");
  return parse_dtype(name.c_str());
}

void kv_cache_mib_option(const Args& args, const ModelInfo& info, const Backend& backend, SchedulerOptions* so) {
  if (!args.has("--kv-cache-mib")) return;
  const int64_t mib = args.get_int("--kv-cache-mib", 0, 1, int64_t(1) << 30);
  const DType dtype = so->kv_dtype ? *so->kv_dtype : default_kv_dtype(backend.device(), info.dtype);
  const uint64_t block = KvCache::bytes_per_block(info.n_layers, KvCache::block_size_for(so->n_ctx, so->kv_block_size),
                                                  info.n_kv_heads * info.head_dim, dtype);
  const uint64_t blocks = (uint64_t(mib) << 20) / block;
  MINFER_CHECK(blocks >= 1, "--kv-cache-mib ", mib, ": less than one block of ", block, " bytes");
  so->kv_blocks = int64_t(std::min<uint64_t>(blocks, INT32_MAX));
}

std::optional<WeightTypes> weights_dtype_option(const Args& args, const char* option) {
  if (!args.has(option)) return std::nullopt;
  const std::optional<WeightTypes> types = WeightTypes::parse(args.get(option));
  MINFER_CHECK(types, option, ": '", args.get(option), "' is not a weights type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0 or "
               "q5_1 (presets also q2_k .. q6_k, q4_k_m and q5_k_m)");
  return types;
}

Communicator* split_communicator() {
  // Under mpirun, mpirun's ranks, even one (cli/cli_ranks.h): at -np 1 on a GPU the model runs
  // its collectives through NCCL all the same, which is how tools/gpu-check.sh exercises them.
  return started_by_mpi_launcher() ? &world_communicator() : nullptr;
}

LlamaOptions llama_options(const Args& args) {
  LlamaOptions options;
  options.dtype = weights_dtype_option(args, "--dtype");
  std::string kernels = args.get("--kernels", "fused");
  MINFER_CHECK(kernels == "fused" || kernels == "unfused", "--kernels: '", kernels,
               "' is not fused or unfused");
  options.kernels = kernels == "fused" ? Kernels::fused : Kernels::unfused;
  options.communicator = split_communicator();
  return options;
}

std::string prompt_text(const Args& args) {
  MINFER_CHECK(args.has("-i") != args.has("-f"), "give the text as -i TEXT or -f FILE, one of them");
  if (args.has("-i")) return args.get("-i");
  return InputFile(args.get("-f"), "text file").read_all(uint64_t(64) << 20);
}

std::unique_ptr<TextTokenizer> command_tokenizer(const Args& args, const std::string& model_spec) {
  if (args.has("-z")) return load_tokenizer_file(args.get("-z"));
  if (model_spec.empty()) return nullptr;
  return load_model_tokenizer(model_spec);
}

void check_tokenizer_fits(const TextTokenizer& tokenizer, const ModelInfo& info, const std::string& source) {
  MINFER_CHECK(tokenizer.vocab_size() <= info.vocab_size, source, ": ", tokenizer.vocab_size(),
               " tokens, but the model has a vocabulary of ", info.vocab_size);
}

std::string TextStream::push(int32_t id) {
  std::string text = utf8_.push(tokenizer_.token_bytes(previous_, id));
  previous_ = id;
  return printable(std::move(text));
}

std::string TextStream::flush() { return printable(utf8_.flush()); }

std::string TextStream::printable(std::string text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) out += c;
    else if (c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f') out += c;
  }
  return out;
}

std::string format_bytes(uint64_t bytes) {
  char text[32];
  if (bytes >= (uint64_t(1) << 30))
    std::snprintf(text, sizeof(text), "%.2f GiB", double(bytes) / double(1 << 30));
  else
    std::snprintf(text, sizeof(text), "%.1f MiB", double(bytes) / double(1 << 20));
  return text;
}

Engine load_engine(const Args& args, const std::string& model_spec) {
  return load_engine(args, model_spec, llama_options(args));
}

Engine load_engine(const Args& args, const std::string& model_spec, const LlamaOptions& options) {
  MINFER_CHECK(!model_spec.empty(), "-m MODEL is required (a model file or folder, or preset:NAME)");
  Engine engine;
  const BackendKind kind = parse_backend_kind(args.get("--device", "auto"));
  check_backend_options(args, kind);
  engine.backend = make_backend(kind, backend_options(args));
  engine.model = load_model(model_spec, *engine.backend, options);
  describe_model(*engine.model, *engine.backend, "model");
  return engine;
}

std::unique_ptr<LlamaModel> load_draft_model(const std::string& spec, const LlamaOptions& options, Backend& backend,
                                             const ModelInfo& target) {
  auto draft = load_model(spec, backend, options);
  describe_model(*draft, backend, "draft model");
  MINFER_CHECK(draft->info().vocab_size == target.vocab_size, "--draft: the draft model's vocabulary has ",
               draft->info().vocab_size, " tokens and the target's ", target.vocab_size, ": they must be the same");
  return draft;
}

void describe_model(const LlamaModel& model, const Backend& backend, const char* what) {
  const ModelInfo& info = model.info();
  const std::string types = info.weight_types.empty() ? dtype_name(info.dtype) : "mixed (" + info.weight_types + ")";
  const std::string layout = model.weight_layout().empty() ? "" : " (" + model.weight_layout() + ")";
  std::fprintf(stderr, "minfer: %s %s (%s), %.1fM params, %s of %s weights%s on %s\n", what, info.name.c_str(),
               info.shape.c_str(), double(info.n_params) / 1e6, format_bytes(info.weight_bytes).c_str(), types.c_str(),
               layout.c_str(), backend.name().c_str());
  if (const TensorSplit* split = model.split())  // the shape above is this rank's part
    std::fprintf(stderr, "minfer: tensor parallel over %s: %s\n", model.ranks()->name().c_str(),
                 split->describe(model.full_config()).c_str());
}

}  // namespace minfer::cli
