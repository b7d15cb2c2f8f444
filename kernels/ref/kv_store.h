#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace minfer::ref {

// Writes the keys and values of row m into the cache slots of its sequence and position, head
// by head: for every KV head h,
//   k_cache[seq[m], h, pos[m], :] = k[m, h, :],  v_cache[seq[m], h, pos[m], :] = v[m, h, :]
// The cache may be f32, f16 or bf16 (rounded to nearest even on the way in).
void kv_store(void* k_cache, void* v_cache, DType cache_dtype,  // (n_seqs, n_kv_heads, n_ctx, head_dim) each
              const float* k, int64_t ld_k,                     // (M, n_kv_heads * head_dim)
              const float* v, int64_t ld_v,                     // (M, n_kv_heads * head_dim)
              const int32_t* seq, const int32_t* pos,           // (M)
              int64_t M, int64_t n_kv_heads, int64_t head_dim, int64_t n_ctx);

}  // namespace minfer::ref
