#pragma once

#include <cstdint>

#include "engine/dtype.h"

namespace minfer::ref {

// Causal attention over a KV cache. Row m is query position pos[m] of sequence seq[m]; it
// attends to positions 0 .. pos[m] of that sequence's cache (already written, its own included).
// Head h reads KV head h / (n_heads / n_kv_heads) (grouped-query attention):
//   score[t] = q[m, h, :] . k_cache[seq, kv_head, t, :] / sqrt(head_dim)
//   out[m, h, :] = sum_t softmax(score)[t] * v_cache[seq, kv_head, t, :]
void attention(float* out, int64_t ld_out,                           // (M, n_heads * head_dim)
               const float* q, int64_t ld_q,                         // (M, n_heads * head_dim)
               const void* k_cache, const void* v_cache, DType cache_dtype,  // (B, n_kv_heads, S, head_dim)
               const int32_t* seq, const int32_t* pos,               // (M)
               int64_t M, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t S);

}  // namespace minfer::ref
