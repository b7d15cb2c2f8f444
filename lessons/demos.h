// The lessons of `minfer demo`: each runs its CPU half everywhere and its CUDA half where a GPU
// is present, prints tables and the conclusion the numbers support, and writes NAME.json.
#pragma once

#include "lessons/report.h"

namespace minfer::demo {

void divergence(const Options& o);
void sequential(const Options& o);
void crossover(const Options& o);
void transfer(const Options& o);
void roofline(const Options& o);
void tensor_cores(const Options& o);
void launch(const Options& o);
void batching(const Options& o);
void bytes(const Options& o);
void continuous(const Options& o);
void speculative(const Options& o);
void prompt_cache(const Options& o);
void paged_kv(const Options& o);
void experts(const Options& o);
void tensor_parallel(const Options& o);
// The all-reduce sweep of tensor_parallel, run on each rank of the `minfer demo tensor-parallel`
// that the lesson starts under mpirun -np 2: rank 0 prints "all-reduce B bytes S s" per size.
void tensor_parallel_ranks(const Options& o);

}  // namespace minfer::demo
