// What several subcommands share: choosing the device, building the backend and loading the model
// from the common options, and printing what was loaded.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/communicator.h"
#include "engine/scheduler.h"
#include "model/llama.h"
#include "tokenizers/text_tokenizer.h"
#include "cli/args.h"

namespace minfer {
// The git commit this binary was built from ("-dirty" with uncommitted changes), written by
// cmake/build_info.cmake into the build; the benches put it in their JSON.
const char* build_commit();
}  // namespace minfer

namespace minfer::cli {

// The options every command that runs a model accepts.
std::vector<Option> engine_options();

BackendOptions backend_options(const Args& args);
// An option that does nothing on the chosen backend is an error naming it: --gemm and --graphs
// (CUDA only) on ref or cpu; --threads, --spin-us (CPU workers) and --batch-invariant (the CPU
// kernels' choice) on cuda, and on ref, which runs on one thread.
void check_backend_options(const Args& args, BackendKind kind);
bool parse_on_off(const std::string& value, const std::string& option);
// The ranks a model is split over under mpirun (cli/cli_ranks.h), even one; nullptr without mpirun.
Communicator* split_communicator();
// --dtype and --kernels, and split_communicator().
LlamaOptions llama_options(const Args& args);
// A weights type option (--dtype, --draft-dtype): unset when not given; a dtype or a K-quant mix
// (WeightTypes::parse).
std::optional<WeightTypes> weights_dtype_option(const Args& args, const char* option);
// --seed S (at least 1), or one from the clock when not given (odd, so never 0).
uint64_t seed_option(const Args& args);
// --kv-dtype: unset when not given (the decoder's default for the device).
std::optional<DType> kv_dtype_option(const Args& args);
// --kv-cache-mib N: the scheduler's pool of KV blocks, as many whole blocks as N MiB holds (so's
// kv_dtype, n_ctx and kv_block_size set already); left as it is when not given.
void kv_cache_mib_option(const Args& args, const ModelInfo& info, const Backend& backend, SchedulerOptions* so);

// Loads -m MODEL on a new backend and prints a line about it (and its memory) on stderr.
struct Engine {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
};
Engine load_engine(const Args& args, const std::string& model_spec);
Engine load_engine(const Args& args, const std::string& model_spec, const LlamaOptions& options);
// The draft model of `--draft SPEC` (speculative decoding) on the target's backend, described on
// stderr; a vocabulary other than the target's is an error naming both sizes.
std::unique_ptr<LlamaModel> load_draft_model(const std::string& spec, const LlamaOptions& options, Backend& backend,
                                             const ModelInfo& target);
// The line load_engine prints: "minfer: WHAT NAME (shape), params, bytes of DTYPE weights on DEVICE".
void describe_model(const LlamaModel& model, const Backend& backend, const char* what);

std::string format_bytes(uint64_t bytes);  // "57.6 MiB"

// The tokenizer of a command: -z PATH when given (a tokenizer.json, a GGUF file's vocabulary or
// llama2.c's tokenizer.bin), otherwise the one -m MODEL carries (formats/model_files.h); nullptr
// when there is neither.
std::unique_ptr<TextTokenizer> command_tokenizer(const Args& args, const std::string& model_spec);
// A tokenizer whose ids reach past the model's vocabulary is an error naming both sizes (a
// smaller one is fine: models pad their embedding tables).
void check_tokenizer_fits(const TextTokenizer& tokenizer, const ModelInfo& info, const std::string& source);

// Generated tokens as text, as they arrive: each token's bytes (TextTokenizer::token_bytes),
// whole UTF-8 characters only (Utf8Stream), and control characters other than white space
// dropped, as run.c's safe_printf drops them.
class TextStream {
 public:
  explicit TextStream(const TextTokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::string push(int32_t id);  // the text that is now complete
  std::string flush();

 private:
  static std::string printable(std::string text);
  const TextTokenizer& tokenizer_;
  Utf8Stream utf8_;
  int32_t previous_ = -1;
};

// The text of -i TEXT or -f FILE (exactly one of them; Error otherwise). A file is read whole,
// up to 64 MiB, and must be a regular file.
std::string prompt_text(const Args& args);

}  // namespace minfer::cli
