#include "cli/cli_ranks.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "engine/communicator.h"

namespace minfer::cli {

namespace {

// Commands whose every step every rank can take from the arguments alone (generate, bench,
// perplexity), those whose passes rank 0 sends the others (chat, serve: follow_rank_0), and demo,
// whose tensor-parallel lesson starts its own ranks (cmd_demo refuses the others).
bool runs_across_ranks(const char* command) {
  for (const char* name : {"generate", "bench", "perplexity", "chat", "serve", "demo"})
    if (std::strcmp(command, name) == 0) return true;
  return false;
}

std::string& prefix() {
  static std::string text;
  return text;
}

// serve takes SIGINT, SIGTERM and SIGHUP on a thread of its own (sigwait), which needs them blocked
// in every thread; MPI's initialisation starts threads, which would take them and die, so they
// are blocked before it, and every thread inherits the mask.
void block_serve_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals, signal);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

}  // namespace

FILE* join_ranks(const char* command) {
  if (!started_by_mpi_launcher()) return stderr;
  // The launcher's own count and rank name this rank's errors before MPI starts (OpenMPI's
  // variables; MPI's world, below, replaces them).
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (size != nullptr && rank != nullptr && std::strcmp(size, "1") != 0) prefix() = "rank " + std::string(rank) + ": ";
  MINFER_CHECK(runs_across_ranks(command), "minfer ", command,
               " does not run across ranks (mpirun -np N): generate, bench, perplexity, chat and serve do");
  if (std::strcmp(command, "serve") == 0) block_serve_signals();
  const Communicator& world = world_communicator();
  if (world.size() == 1) return stderr;
  prefix() = "rank " + std::to_string(world.rank()) + ": ";
  if (world.rank() == 0) return stderr;
  FILE* errors = fdopen(dup(STDERR_FILENO), "w");
  MINFER_CHECK(errors != nullptr, "rank ", world.rank(), ": could not keep its standard error");
  const int null = open("/dev/null", O_WRONLY);
  MINFER_CHECK(null >= 0, "rank ", world.rank(), ": could not open /dev/null");
  std::fflush(stdout);
  std::fflush(stderr);
  dup2(null, STDOUT_FILENO);
  dup2(null, STDERR_FILENO);
  close(null);
  return errors;
}

const char* rank_prefix() { return prefix().c_str(); }

bool follow_rank_0(Decoder& decoder) {
  if (!started_by_mpi_launcher()) return false;
  Communicator& world = world_communicator();
  if (world.size() == 1) return false;
  if (world.rank() == 0) {
    decoder.lead(world);
    std::fprintf(stderr, "minfer: rank 0 of %d, process %d, leads the other ranks' passes\n", world.size(),
                 static_cast<int>(getpid()));
    return false;
  }
  // Rank 0 alone decides when the run ends: serve's drain after SIGTERM needs every rank for the
  // requests it finishes, so a signal to this rank (mpirun sends SIGTERM to every rank) is ignored.
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) std::signal(signal, SIG_IGN);
  decoder.follow(world);
  return true;
}

}  // namespace minfer::cli
