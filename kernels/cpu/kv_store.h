#pragma once

#include <cstdint>

#include "core/threads.h"

namespace minfer::cpu {

// k_cache[seq[m], h, pos[m], :] = k[m, h, :] for every KV head h, and likewise for v (see
// kernels/ref/kv_store.h). The CPU cache is f32.
void kv_store(ThreadPool& pool,
              float* k_cache, float* v_cache,         // (n_seqs, n_kv_heads, n_ctx, head_dim)
              const float* k, int64_t ld_k,           // (M, n_kv_heads * head_dim)
              const float* v, int64_t ld_v,           // (M, n_kv_heads * head_dim)
              const int32_t* seq, const int32_t* pos,  // (M)
              int64_t M, int64_t n_kv_heads, int64_t head_dim, int64_t n_ctx);

// The same for one row, on the calling thread (shared with the fused rope_kv_store).
void store_row(float* k_cache, float* v_cache, const float* k_row, const float* v_row, int32_t seq,
               int32_t pos, int64_t n_kv_heads, int64_t head_dim, int64_t n_ctx);

}  // namespace minfer::cpu
