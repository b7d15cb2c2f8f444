// minfer: the command-line tool. `minfer help` lists the subcommands; every error is one line on
// stderr ("minfer: error: ...") and a non-zero exit status. A command's output that could not be
// written (a full disk or pipe behind stdout) is an error too, and an interrupted command leaves
// no half-written file behind (core/files.h).
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include "core/error.h"
#include "core/files.h"
#include "cli/cli_ranks.h"
#include "cli/commands.h"
#include "engine/communicator.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* help;
};

const Command kCommands[] = {
    {"generate", minfer::cli::cmd_generate, "text from a prompt, for one sequence or a batch"},
    {"naive", minfer::cli::cmd_naive, "text from the one-page forward pass (model/naive_llama.h), run.c's loop"},
    {"chat", minfer::cli::cmd_chat, "a conversation with an instruct model, in its chat template"},
    {"serve", minfer::cli::cmd_serve, "an OpenAI-style HTTP server (completions, chat), continuously batched"},
    {"bench", minfer::cli::cmd_bench, "prefill and decode throughput against the roofline"},
    {"bench-serve", minfer::cli::cmd_bench_serve, "serving throughput and latency on a synthetic trace, continuous and static"},
    {"demo", minfer::cli::cmd_demo, "the GPU lessons as measured experiments (minfer demo --list)"},
    {"perplexity", minfer::cli::cmd_perplexity, "perplexity over a text; KL divergence against another dtype"},
    {"tokenize", minfer::cli::cmd_tokenize, "the token ids of a text"},
    {"make-model", minfer::cli::cmd_make_model, "write a model with seeded weights (llama2.c, Hugging Face or GGUF)"},
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
  minfer::install_signal_cleanup();
  std::signal(SIGPIPE, SIG_IGN);  // a closed pipe on stdout is a write error (EPIPE), not a signal
  // Errors go to `errors` (a rank of an mpirun run past 0 prints nothing else), named by rank in a
  // run of several, and such an error ends every rank (cli/cli_ranks.h).
  FILE* errors = stderr;
  try {
    for (const auto& c : kCommands)
      if (std::strcmp(argv[1], c.name) == 0) {
        errors = minfer::cli::join_ranks(c.name);
        const int status = c.run(argc, argv);
        if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
          std::fprintf(errors, "minfer: error: %swriting to standard output failed: %s\n", minfer::cli::rank_prefix(),
                       std::strerror(errno));
          minfer::end_all_ranks_after_error(1);
          return 1;
        }
        return status;
      }
    std::fprintf(stderr, "minfer: error: unknown command '%s' (see minfer help)\n", argv[1]);
    return 2;
  } catch (const minfer::Error& e) {
    std::fprintf(errors, "minfer: error: %s%s\n", minfer::cli::rank_prefix(), e.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(errors, "minfer: error: %sout of host memory\n", minfer::cli::rank_prefix());
  } catch (const std::exception& e) {
    std::fprintf(errors, "minfer: error: %s%s\n", minfer::cli::rank_prefix(), e.what());
  }
  std::fflush(errors);
  minfer::end_all_ranks_after_error(1);
  return 1;
}
