// `minfer make-model`: writes a llama2.c checkpoint of any shape with the seeded weights of the
// presets, so tests (and users) can generate what they load.
#include <cstdio>

#include "engine/backend_cpu.h"
#include "core/error.h"
#include "core/files.h"
#include "models/checkpoint.h"
#include "models/presets.h"
#include "tools/args.h"
#include "tools/cli_common.h"
#include "tools/commands.h"

namespace minfer::cli {

int cmd_make_model(int argc, char** argv) {
  Args args("make-model",
            "Writes a llama2.c checkpoint with seeded random weights: a preset's shape, or any shape.",
            {{"-o,--output", "PATH", "the file to write (required)"},
             {"--preset", "NAME", "start from a preset's shape (default tiny)"},
             {"--format", "V", "v0 (legacy, what run.c reads; default) or v1"},
             {"--dim", "N", "width of the residual stream"},
             {"--hidden-dim", "N", "width of the feed-forward layer"},
             {"--layers", "N", "number of layers"},
             {"--heads", "N", "query heads"},
             {"--kv-heads", "N", "key/value heads"},
             {"--vocab", "N", "vocabulary size"},
             {"--seq-len", "N", "context length"},
             {"--separate-classifier", "", "an output classifier of its own (not the embedding)"},
             {"--seed", "S", "weights seed (default: the presets' seed)"},
             {"--threads", "N", "threads generating weights, 1 to 1024 (default: every core)"}});
  args.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::printf("%s", args.usage().c_str());
    return 0;
  }
  MINFER_CHECK(args.has("-o"), "-o PATH is required");
  check_output_path(args.get("-o"), "-o");  // before generating anything
  const std::string format = args.get("--format", "v0");
  MINFER_CHECK(format == "v0" || format == "v1", "--format: '", format, "' is not v0 or v1");
  LlamaConfig c = find_preset(args.get("--preset", "tiny")).config;
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
  c.validate("make-model");
  const uint64_t seed = static_cast<uint64_t>(args.get_int("--seed", int64_t(kDefaultModelSeed), 0, INT64_MAX));

  BackendOptions backend_options;
  backend_options.threads = static_cast<int>(args.get_int("--threads", 0, 1, 1024));
  CpuBackend cpu(backend_options);
  size_t free_bytes = 0, total_bytes = 0;
  uint64_t bytes = c.n_params() * 4;
  if (cpu.pool().upstream().memory_info(&free_bytes, &total_bytes) && bytes > free_bytes)
    fail("make-model: the weights need ", bytes, " bytes in memory, ", free_bytes, " are available");
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
  write_checkpoint(args.get("-o"), w, format == "v1" ? CheckpointFormat::v1 : CheckpointFormat::v0);
  std::fprintf(stderr, "minfer: wrote %s (%s checkpoint, %s, %llu params)\n", args.get("-o").c_str(),
               format.c_str(), c.describe().c_str(), static_cast<unsigned long long>(c.n_params()));
  return 0;
}

}  // namespace minfer::cli
