#include "cli/cli_ranks.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "engine/communicator.h"

namespace minfer::cli {

namespace {

// Commands whose every step every rank can take from the arguments alone. chat and serve read
// requests on rank 0 only, which the others would need broadcast: not yet (issue 54).
bool runs_across_ranks(const char* command) {
  for (const char* name : {"generate", "bench", "perplexity"})
    if (std::strcmp(command, name) == 0) return true;
  return false;
}

std::string& prefix() {
  static std::string text;
  return text;
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
               " does not run across ranks (mpirun -np N): generate, bench and perplexity do");
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

}  // namespace minfer::cli
