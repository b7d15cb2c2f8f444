#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/threads.h"
#include "kernels/ref/attention.h"

namespace minfer::cpu {

// Causal grouped-query attention over an f32 or f16 KV cache by either algorithm of
// kernels/ref/attention.h: three passes per (row, head), or one pass over blocks of 64 keys with
// the online softmax (the 2 to 16 query heads of a KV head as one task where the call has at
// least 4 (row, KV head) pairs a thread, else a query head a task). Every sum is in f32. f16 keys
// and values are widened to f32 as they are loaded: a vector at a time (vcvtph2ps, where the CPU
// has F16C) in the AVX-512 and AVX2 kernels, which take a head_dim of whole vectors up to 128,
// and one value at a time (f16_to_f32) in the plain loops of other heads and of builds without
// AVX2. The op harness (tests/test_backend_ops.cpp) checks both algorithms, both caches and both
// paths against the reference. The arguments and their shapes: AttentionArgs
// (kernels/ref/attention.h).
template <AttentionAlgorithm A>
void attention(ThreadPool& pool, const AttentionArgs& args);

}  // namespace minfer::cpu
