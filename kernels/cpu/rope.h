#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/threads.h"
#include "kernels/ref/kv_store.h"

namespace minfer::cpu {

// Rotates pairs of every head by the angle of the row's position (see kernels/ref/rope.h).
void rope(ThreadPool& pool,
          float* x, int64_t ld_x,  // (M, n_heads * head_dim), in place
          const int32_t* pos,      // (M)
          const float* table,      // (n_ctx, head_dim / 2, 2)
          int64_t M, int64_t n_heads, int64_t head_dim);

// Fused: rotates q and k, then stores k and v into the cache (kv_store) in the same pass over
// the rows. Equal to rope(q), rope(k), kv_store(k, v).
void rope_kv_store(ThreadPool& pool,
                   void* k_cache, void* v_cache,           // (n_blocks, n_kv_heads, block_size, head_dim)
                   DType cache_dtype,                      // f32 or f16 (see kv_store.h)
                   float* q, int64_t ld_q,                 // (M, n_heads * head_dim), in place
                   float* k, int64_t ld_k,                 // (M, n_kv_heads * head_dim), in place
                   const float* v, int64_t ld_v,           // (M, n_kv_heads * head_dim)
                   const int32_t* seq, const int32_t* pos,  // (M)
                   const float* table,                     // (n_ctx, head_dim / 2, 2)
                   int64_t M, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                   const ref::KvBlockTable& cache_table);

}  // namespace minfer::cpu
