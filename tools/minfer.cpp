// minfer: the command-line tool. `minfer help` lists the subcommands; every error is one line on
// stderr ("minfer: error: ...") and a non-zero exit status.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include "core/error.h"
#include "tools/commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* help;
};

const Command kCommands[] = {
    {"generate", minfer::cli::cmd_generate, "text from a prompt, for one sequence or a batch"},
    {"bench", minfer::cli::cmd_bench, "prefill and decode throughput against the roofline"},
    {"demo", minfer::cli::cmd_demo, "the GPU lessons as measured experiments (minfer demo --list)"},
    {"tokenize", minfer::cli::cmd_tokenize, "the token ids of a text"},
    {"make-model", minfer::cli::cmd_make_model, "write a llama2.c checkpoint with seeded weights"},
    {"devices", minfer::cli::cmd_devices, "what the engine sees: GPUs and the CPU"},
};

void print_usage(FILE* out) {
  std::fprintf(out, "usage: minfer COMMAND [options]   (minfer COMMAND --help for its options)\n\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.help);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  if (std::strcmp(argv[1], "help") == 0 || std::strcmp(argv[1], "--help") == 0 ||
      std::strcmp(argv[1], "-h") == 0) {
    print_usage(stdout);
    return 0;
  }
  try {
    for (const auto& c : kCommands)
      if (std::strcmp(argv[1], c.name) == 0) return c.run(argc, argv);
    std::fprintf(stderr, "minfer: error: unknown command '%s' (see minfer help)\n", argv[1]);
    return 2;
  } catch (const minfer::Error& e) {
    std::fprintf(stderr, "minfer: error: %s\n", e.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "minfer: error: out of host memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minfer: error: %s\n", e.what());
  }
  return 1;
}
