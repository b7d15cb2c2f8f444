// What several subcommands share: choosing the device, building the backend and loading the model
// from the common options, and printing what was loaded.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "models/llama.h"
#include "tools/args.h"

namespace minfer::cli {

// The options every command that runs a model accepts.
std::vector<Option> engine_options();

BackendOptions backend_options(const Args& args);
// An option that does nothing on the chosen backend is an error naming it: --gemm and --graphs
// (CUDA only) on ref or cpu; --threads and --spin-us (CPU workers) on cuda, and on ref, which
// runs on one thread.
void check_backend_options(const Args& args, BackendKind kind);
bool parse_on_off(const std::string& value, const std::string& option);
LlamaOptions llama_options(const Args& args);

// Loads -m MODEL on a new backend and prints a line about it (and its memory) on stderr.
struct Engine {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
};
Engine load_engine(const Args& args, const std::string& model_spec);
// The line load_engine prints: "minfer: WHAT NAME (shape), params, bytes of DTYPE weights on DEVICE".
void describe_model(const LlamaModel& model, const Backend& backend, const char* what);

std::string format_bytes(uint64_t bytes);  // "57.6 MiB"

// The text of -i TEXT or -f FILE (exactly one of them; Error otherwise). A file is read whole,
// up to 64 MiB, and must be a regular file.
std::string prompt_text(const Args& args);

}  // namespace minfer::cli
