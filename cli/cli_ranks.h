// minfer under mpirun: which commands run across ranks, and what each rank prints.
//
// `mpirun -np N minfer generate ...` starts N processes with the same arguments. Each holds its
// rank's part of the model (model/tensor_split.h) and runs the same command in step with the
// others, so every rank computes the same forward passes, and the logits gathered from all ranks
// are the same bytes on each: the same token is sampled everywhere (the clock's seed is rank 0's).
// Rank 0 prints; the other ranks print only their errors.
#pragma once

#include <cstdio>

namespace minfer::cli {

// Joins the run's ranks when minfer was started by mpirun (a no-op otherwise) and returns the
// stream errors are printed to: stderr, or on a rank past 0 a copy of it, its own stdout and stderr
// then going to /dev/null. Throws Error for a command that does not run across ranks (yet).
FILE* join_ranks(const char* command);
// "rank R: " in a run of several ranks, else "".
const char* rank_prefix();

}  // namespace minfer::cli
