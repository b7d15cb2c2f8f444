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
bool parse_on_off(const std::string& value, const std::string& option);
LlamaOptions llama_options(const Args& args);

// Loads -m MODEL on a new backend and prints a line about it (and its memory) on stderr.
struct Engine {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
};
Engine load_engine(const Args& args, const std::string& model_spec);

std::string format_bytes(uint64_t bytes);  // "57.6 MiB"

}  // namespace minfer::cli
