// minfer under mpirun: which commands run across ranks, and what each rank prints.
//
// `mpirun -np N minfer generate ...` starts N processes with the same arguments. Each holds its
// rank's part of the model (model/tensor_split.h) and runs the same command in step with the
// others, so every rank computes the same forward passes, and the logits gathered from all ranks
// are the same bytes on each: the same token is sampled everywhere (the clock's seed is rank 0's).
// Rank 0 prints; the other ranks print only their errors.
//
// chat and serve read their requests on rank 0 alone, so the other ranks cannot compute the passes
// themselves: rank 0's decoder leads and theirs follow (Decoder::lead), every pass broadcast.
#pragma once

#include <cstdio>

#include "engine/decoder.h"

namespace minfer::cli {

// Joins the run's ranks when minfer was started by mpirun (a no-op otherwise) and returns the
// stream errors are printed to: stderr, or on a rank past 0 a copy of it, its own stdout and stderr
// then going to /dev/null. Throws Error for a command that does not run across ranks (yet).
FILE* join_ranks(const char* command);
// "rank R: " in a run of several ranks, else "".
const char* rank_prefix();
// For chat and serve once their decoder is made (the same on every rank): on rank 0 of several,
// the decoder leads the other ranks and this returns false, the command going on (it calls
// decoder.end_following() when done); on another rank it follows rank 0's passes until then and
// returns true (the command is over on this rank). In one process: false, and nothing changes.
bool follow_rank_0(Decoder& decoder);

}  // namespace minfer::cli
