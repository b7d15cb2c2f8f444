#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/host_device.h"

namespace minfer::ref {

// note: the one place the KV cache layout is written down. A layer's cache is
// (n_seqs, n_kv_heads, n_ctx, head_dim), head-major (why: engine/kv_cache.h); the keys of
// (sequence, KV head) are n_ctx rows of head_dim from this offset, position `pos` at
// + pos * head_dim. Every backend's kv_store, rope_kv_store and attention kernels index with it.
MINFER_HOST_DEVICE inline int64_t kv_cache_offset(int64_t seq, int64_t kv_head, int64_t pos,  //
                                                  int64_t n_kv_heads, int64_t n_ctx, int64_t head_dim) {
  return ((seq * n_kv_heads + kv_head) * n_ctx + pos) * head_dim;
}

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
