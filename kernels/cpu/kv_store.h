#pragma once

#include <cstdint>

#include "engine/threads.h"

namespace minfer::cpu {

// k_cache[seq[m], pos[m], :] = k[m, :] and likewise for v (see kernels/ref/kv_store.h).
// The CPU cache is f32.
void kv_store(ThreadPool& pool,
              float* k_cache, float* v_cache,         // (B, S, kv_dim)
              const float* k, int64_t ld_k,           // (M, kv_dim)
              const float* v, int64_t ld_v,           // (M, kv_dim)
              const int32_t* seq, const int32_t* pos,  // (M)
              int64_t M, int64_t kv_dim, int64_t S);

}  // namespace minfer::cpu
