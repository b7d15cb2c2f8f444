#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/threads.h"
#include "kernels/ref/attention.h"

namespace minfer::cpu {

// Causal grouped-query attention over an f32 or f16 KV cache by either algorithm of
// kernels/ref/attention.h: three passes per (row, head), or one pass over blocks of 64 keys with
// the online softmax (the query heads of a KV head together, where there are enough rows). f16
// keys and values are widened to f32 in registers (vcvtph2ps) and every sum is in f32. The op harness checks each against the reference. The arguments and their
// shapes: AttentionArgs (kernels/ref/attention.h).
template <AttentionAlgorithm A>
void attention(ThreadPool& pool, const AttentionArgs& args);

}  // namespace minfer::cpu
