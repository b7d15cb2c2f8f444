#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/threads.h"
#include "kernels/ref/kv_store.h"

namespace minfer::cpu {

// k_cache[seq[m], h, pos[m], :] = k[m, h, :] (through the block table) for every KV head h, and likewise for v (see
// kernels/ref/kv_store.h). The cache is f32, or f16 (cache_dtype), rounded to nearest even on
// the way in as the reference rounds.
void kv_store(ThreadPool& pool,
              void* k_cache, void* v_cache,           // (n_blocks, n_kv_heads, block_size, head_dim)
              DType cache_dtype,                      // f32 or f16
              const float* k, int64_t ld_k,           // (M, n_kv_heads * head_dim)
              const float* v, int64_t ld_v,           // (M, n_kv_heads * head_dim)
              const int32_t* seq, const int32_t* pos,  // (M)
              int64_t M, int64_t n_kv_heads, int64_t head_dim, const ref::KvBlockTable& table);

// The same for one row, on the calling thread (shared with the fused rope_kv_store).
void store_row(void* k_cache, void* v_cache, DType cache_dtype, const float* k_row, const float* v_row,
               int32_t seq, int32_t pos, int64_t n_kv_heads, int64_t head_dim, const ref::KvBlockTable& table);

}  // namespace minfer::cpu
