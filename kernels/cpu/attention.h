#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/threads.h"
#include "kernels/ref/attention.h"

namespace minfer::cpu {

// Causal grouped-query attention over an f32 or f16 KV cache by either algorithm of
// kernels/ref/attention.h: three passes per (row, head), or one pass over blocks of 64 keys with
// the online softmax. f16 keys and values are widened to f32 in registers (vcvtph2ps) and every
// sum is in f32. The op harness checks each against the reference.
template <AttentionAlgorithm A>
void attention(ThreadPool& pool,
               float* out, int64_t ld_out,               // (M, n_heads * head_dim)
               const float* q, int64_t ld_q,             // (M, n_heads * head_dim)
               const void* k_cache, const void* v_cache,  // (n_seqs, n_kv_heads, n_ctx, head_dim)
               DType cache_dtype,                         // f32 or f16
               const int32_t* seq, const int32_t* pos,    // (M)
               int64_t M, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t n_ctx);

}  // namespace minfer::cpu
