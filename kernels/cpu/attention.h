#pragma once

#include <cstdint>

#include "engine/threads.h"

namespace minfer::cpu {

// Causal grouped-query attention over an f32 KV cache (see kernels/ref/attention.h).
// Online = false: three passes per head (all scores, softmax, weighted sum of values).
// Online = true:  one pass over the cache in blocks of keys with a running max and sum (the online
//                 softmax of flash attention); the scores never make a round trip through memory.
// Both give the same result up to rounding; the op harness checks each against the reference.
template <bool Online>
void attention(ThreadPool& pool,
               float* out, int64_t ld_out,               // (M, n_heads * head_dim)
               const float* q, int64_t ld_q,             // (M, n_heads * head_dim)
               const float* k_cache, const float* v_cache,  // (B, n_kv_heads, S, head_dim)
               const int32_t* seq, const int32_t* pos,    // (M)
               int64_t M, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t S);

}  // namespace minfer::cpu
