// `minfer make-model`: writes a model of any shape with the seeded weights of the presets (a
// llama2.c checkpoint, a Hugging Face folder or a GGUF file), so tests (and users) can generate what they load.
#include <sys/stat.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend_cpu.h"
#include "core/error.h"
#include "core/files.h"
#include "formats/checkpoint.h"
#include "formats/model_writers.h"
#include "tokenizers/tokenizer.h"
#include "model/presets.h"
#include "cli/args.h"
#include "cli/cli_common.h"
#include "cli/commands.h"

namespace minfer::cli {

namespace {

// linear:FACTOR or llama3:FACTOR:LOW:HIGH:ORIGINAL_CTX
RopeScaling parse_rope_scaling(const std::string& text) {
  const std::vector<std::string> parts = [&] {
    std::vector<std::string> p;
    size_t start = 0;
    for (size_t colon; (colon = text.find(':', start)) != std::string::npos; start = colon + 1)
      p.push_back(text.substr(start, colon - start));
    p.push_back(text.substr(start));
    return p;
  }();
  RopeScaling r;
  if (parts[0] == "linear" && parts.size() == 2) {
    r.type = RopeScaling::Type::linear;
    r.factor = parse_double(parts[1], "--rope-scaling factor", 1.0, 1e6);
  } else if (parts[0] == "llama3" && parts.size() == 5) {
    r.type = RopeScaling::Type::llama3;
    r.factor = parse_double(parts[1], "--rope-scaling factor", 1.0, 1e6);
    r.low_freq_factor = parse_double(parts[2], "--rope-scaling low_freq_factor", 1e-6, 1e6);
    r.high_freq_factor = parse_double(parts[3], "--rope-scaling high_freq_factor", 1e-6, 1e6);
    r.original_max_positions = parse_int(parts[4], "--rope-scaling original context", 1, 1 << 30);
  } else {
    fail("--rope-scaling: '", text, "' is not linear:FACTOR or llama3:FACTOR:LOW:HIGH:ORIGINAL_CTX");
  }
  return r;
}

// llama2.c's tokenizer as GGUF's "llama" vocabulary: pieces with ▁ for spaces, run.c's scores,
// ids 0-2 unknown/control, 3-258 byte pieces.
GgufVocab gguf_vocab_of(const Tokenizer& t) {
  GgufVocab v;
  v.model = "llama";
  v.pre = "default";
  for (int32_t id = 0; id < t.vocab_size(); ++id) {
    std::string piece;
    for (char ch : t.piece(id)) piece += ch == ' ' ? std::string("\xE2\x96\x81") : std::string(1, ch);
    v.tokens.push_back(piece);
    v.scores.push_back(t.score(id));
    v.token_types.push_back(id == 0 ? 2 : id <= 2 ? 3 : id <= 258 ? 6 : 1);
  }
  v.bos_id = 1;
  v.eos_id = 2;
  v.unknown_id = 0;
  return v;
}

std::vector<Option> make_model_options() {
  return {{"-o,--output", "PATH", "the file (or, for hf, the folder) to write (required)"},
          {"--preset", "NAME", "start from a preset's shape (default tiny)"},
          {"--format", "F", "v0 (llama2.c legacy, what run.c reads; default), v1, hf or gguf"},
          {"--dtype", "TYPE", "hf and gguf: f32 (default), f16 or bf16 matrices; gguf also q8_0, q4_0, q4_1, q5_0, q5_1"},
          {"-z,--tokenizer", "PATH", "gguf: a llama2.c tokenizer.bin to store as the file's vocabulary"},
          {"--dim", "N", "width of the residual stream"},
          {"--hidden-dim", "N", "width of the feed-forward layer"},
          {"--layers", "N", "number of layers"},
          {"--heads", "N", "query heads"},
          {"--kv-heads", "N", "key/value heads"},
          {"--vocab", "N", "vocabulary size"},
          {"--seq-len", "N", "context length"},
          {"--head-dim", "N", "hf and gguf: width of a head, when not dim / heads"},
          {"--rope-theta", "T", "hf and gguf: RoPE base (default 10000)"},
          {"--rope-scaling", "S", "hf and gguf: linear:FACTOR or llama3:FACTOR:LOW:HIGH:ORIGINAL_CTX"},
          {"--norm-eps", "E", "hf and gguf: RMSNorm epsilon (default 1e-5)"},
          {"--separate-classifier", "", "an output classifier of its own (not the embedding)"},
          {"--seed", "S", "weights seed (default: the presets' seed)"},
          {"--threads", "N", "threads generating weights, 1 to 1024 (default: every core)"}};
}

bool is_llama2c(const std::string& format) { return format == "v0" || format == "v1"; }

// Before generating anything: a file can be written there (for hf, a folder made or filled).
void check_output(const std::string& out, const std::string& format) {
  struct stat st;
  const bool existing = ::stat(out.c_str(), &st) == 0;
  if (format == "hf" && existing && !S_ISDIR(st.st_mode)) fail("-o: ", out, " exists and is not a folder");
  check_output_path(format == "hf" && existing ? out + "/config.json" : out, "-o");
}

// Options only the hf and gguf formats store, and the vocabulary only gguf stores.
void check_format_options(const Args& args, const std::string& format) {
  for (const char* option : {"--dtype", "--head-dim", "--rope-theta", "--rope-scaling", "--norm-eps", "-z"})
    MINFER_CHECK(!is_llama2c(format) || !args.has(option), option,
                 " does not apply to a llama2.c checkpoint (--format ", format, ")");
  MINFER_CHECK(!args.has("-z") || format == "gguf", "-z applies to --format gguf");
}

// The preset's shape with the shape options applied, validated.
LlamaConfig model_config(const Args& args) {
  const std::string preset = args.get("--preset", "tiny");
  LlamaConfig c = find_preset(preset).config;
  const char* feature = c.family_feature();
  MINFER_CHECK(feature == nullptr, "make-model: preset ", preset, " has ", feature == nullptr ? "" : feature,
               ", and make-model writes Llama models");
  // Shape options are checked by LlamaConfig::validate; here only that they are numbers.
  const int64_t big = INT32_MAX;
  c.dim = args.get_int("--dim", c.dim, INT32_MIN, big);
  c.hidden_dim = args.get_int("--hidden-dim", c.hidden_dim, INT32_MIN, big);
  c.n_layers = args.get_int("--layers", c.n_layers, INT32_MIN, big);
  c.n_heads = args.get_int("--heads", c.n_heads, INT32_MIN, big);
  c.n_kv_heads = args.get_int("--kv-heads", args.has("--heads") ? c.n_heads : c.n_kv_heads, INT32_MIN, big);
  c.vocab_size = args.get_int("--vocab", c.vocab_size, INT32_MIN, big);
  c.n_ctx = args.get_int("--seq-len", c.n_ctx, INT32_MIN, big);
  if (args.has("--separate-classifier")) c.shared_classifier = false;
  c.head_size = args.get_int("--head-dim", c.head_size, 0, big);
  c.rope_theta = args.get_double("--rope-theta", c.rope_theta, 1.0, 1e12);
  c.rms_eps = static_cast<float>(args.get_double("--norm-eps", c.rms_eps, 1e-12, 0.5));
  if (args.has("--rope-scaling")) c.rope_scaling = parse_rope_scaling(args.get("--rope-scaling"));
  c.validate("make-model");
  return c;
}

// -z's vocabulary, which must be the model's size; nullptr without -z.
std::unique_ptr<GgufVocab> vocab_option(const Args& args, const LlamaConfig& c) {
  if (!args.has("-z")) return nullptr;
  auto vocab = std::make_unique<GgufVocab>(gguf_vocab_of(Tokenizer::load(args.get("-z"))));
  MINFER_CHECK(int64_t(vocab->tokens.size()) == c.vocab_size, args.get("-z"), ": ", vocab->tokens.size(),
               " tokens, the model's vocabulary is ", c.vocab_size);
  return vocab;
}

void check_memory(CpuBackend& cpu, const LlamaConfig& c) {
  size_t free_bytes = 0, total_bytes = 0;
  uint64_t bytes = c.n_params() * 4;
  if (cpu.pool().upstream().memory_info(&free_bytes, &total_bytes) && bytes > free_bytes)
    fail("make-model: the weights need ", bytes, " bytes in memory, ", free_bytes, " are available");
}

// Every weight in f32, drawn as the presets draw theirs (weight_init).
LlamaHostWeights seeded_weights(CpuBackend& cpu, const LlamaConfig& c, uint64_t seed) {
  const int64_t L = c.n_layers, d = c.dim, h = c.hidden_dim, q = c.q_dim(), kv = c.kv_dim(), V = c.vocab_size;
  LlamaHostWeights w;
  w.config = c;
  auto make = [&](std::vector<int64_t> shape, WeightKind kind, int64_t layer) {
    Tensor t = cpu.empty(shape, DType::f32);
    WeightInit init = weight_init(c, seed, kind, layer);
    cpu.fill_uniform(t, init.seed, init.lo, init.hi);
    return t;
  };
  w.token_embedding = make({V, d}, WeightKind::embedding, 0);
  for (int64_t l = 0; l < L; ++l) {
    LlamaHostWeights::Layer layer;
    layer.rms_att = make({d}, WeightKind::rms_att, l);
    layer.wq = make({q, d}, WeightKind::wq, l);
    layer.wk = make({kv, d}, WeightKind::wk, l);
    layer.wv = make({kv, d}, WeightKind::wv, l);
    layer.wo = make({d, q}, WeightKind::wo, l);
    layer.rms_ffn = make({d}, WeightKind::rms_ffn, l);
    layer.w1 = make({h, d}, WeightKind::w1, l);
    layer.w2 = make({d, h}, WeightKind::w2, l);
    layer.w3 = make({h, d}, WeightKind::w3, l);
    w.layers.push_back(layer);
  }
  w.rms_final = make({d}, WeightKind::rms_final, 0);
  w.classifier = c.shared_classifier ? w.token_embedding : make({V, d}, WeightKind::classifier, 0);
  return w;
}

// Writes the weights in `format` and says what was written.
void write_model(const std::string& out, const std::string& format, const LlamaHostWeights& w, DType dtype,
                 const GgufVocab* vocab) {
  if (format == "hf")
    write_hf_folder(out, w, dtype);
  else if (format == "gguf")
    write_gguf(out, w, dtype, vocab);
  else
    write_checkpoint(out, w, format == "v1" ? CheckpointFormat::v1 : CheckpointFormat::v0);
  const std::string what = is_llama2c(format)
                               ? "llama2.c " + format + " checkpoint"
                               : std::string(format == "hf" ? "Hugging Face folder, " : "GGUF, ") + dtype_name(dtype);
  std::fprintf(stderr, "minfer: wrote %s (%s, %s, %llu params)\n", out.c_str(), what.c_str(),
               w.config.describe().c_str(), static_cast<unsigned long long>(w.config.n_params()));
}

}  // namespace

int cmd_make_model(int argc, char** argv) {
  Args args("make-model",
            "Writes a model with seeded random weights: a preset's shape, or any shape, as a llama2.c\n"
            "checkpoint, a Hugging Face folder (config.json, model.safetensors) or a GGUF file.",
            make_model_options());
  args.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::printf("%s", args.usage().c_str());
    return 0;
  }
  MINFER_CHECK(args.has("-o"), "-o PATH is required");
  const std::string format = args.get("--format", "v0");
  MINFER_CHECK(format == "v0" || format == "v1" || format == "hf" || format == "gguf", "--format: '", format,
               "' is not v0, v1, hf or gguf");
  const std::string out = args.get("-o");
  check_output(out, format);
  check_format_options(args, format);
  const DType dtype = parse_dtype(args.get("--dtype", "f32").c_str());
  MINFER_CHECK(dtype != DType::i32 && !is_k_quant(dtype), "--dtype: weights are f32, f16, bf16, q8_0, q4_0, q4_1, q5_0 or q5_1");
  const LlamaConfig c = model_config(args);
  const std::unique_ptr<GgufVocab> vocab = vocab_option(args, c);
  const uint64_t seed = static_cast<uint64_t>(args.get_int("--seed", int64_t(kDefaultModelSeed), 0, INT64_MAX));

  BackendOptions backend_options;
  backend_options.threads = static_cast<int>(args.get_int("--threads", 0, 1, 1024));
  CpuBackend cpu(backend_options);
  check_memory(cpu, c);
  write_model(out, format, seeded_weights(cpu, c, seed), dtype, vocab.get());
  return 0;
}

}  // namespace minfer::cli
