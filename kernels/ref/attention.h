#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace minfer {

// Two algorithms compute the attention below, equal up to rounding; the CPU and CUDA backends
// offer both (`--kernels unfused` picks the first, `fused` the second), and the reference backend
// computes the exact answer for either:
//   three_pass      scores = q K^T / sqrt(head_dim) for all keys, then softmax, then the
//                   probability-weighted sum of V: three passes, the scores in a buffer between.
//   online_softmax  one pass over the keys in blocks, keeping a running max and sum and
//                   rescaling the partial output when the max grows (FlashAttention's
//                   recurrence): the scores never leave registers or L1. On CUDA, decode splits
//                   the keys into chunks across blocks and merges their partial states
//                   (flash-decoding), and prefill runs 64-row tiles of queries on Tensor Cores.
enum class AttentionAlgorithm { three_pass, online_softmax };

inline const char* attention_algorithm_name(AttentionAlgorithm a) {
  return a == AttentionAlgorithm::three_pass ? "three-pass" : "online-softmax";
}

// The arguments of one attention call, as the CPU and CUDA kernels take them (see ref::attention
// for the math).
struct AttentionArgs {
  float* out;                   // (M, n_heads * head_dim), rows ld_out apart
  int64_t ld_out;
  const float* q;               // (M, n_heads * head_dim), rows ld_q apart
  int64_t ld_q;
  const void* k_cache;          // (n_seqs, n_kv_heads, n_ctx, head_dim): ref::kv_cache_offset
  const void* v_cache;          // (n_seqs, n_kv_heads, n_ctx, head_dim)
  DType cache_dtype;
  const int32_t* seq;           // (M)
  const int32_t* pos;           // (M)
  int64_t M, n_heads, n_kv_heads, head_dim, n_ctx;
};

}  // namespace minfer

namespace minfer::ref {

// Causal attention over a KV cache. Row m is query position pos[m] of sequence seq[m]; it
// attends to positions 0 .. pos[m] of that sequence's cache (already written, its own included).
// Head h reads KV head h / (n_heads / n_kv_heads) (grouped-query attention):
//   score[t] = q[m, h, :] . k_cache[seq, kv_head, t, :] / sqrt(head_dim)
//   out[m, h, :] = sum_t softmax(score)[t] * v_cache[seq, kv_head, t, :]
void attention(float* out, int64_t ld_out,                           // (M, n_heads * head_dim)
               const float* q, int64_t ld_q,                         // (M, n_heads * head_dim)
               const void* k_cache, const void* v_cache, DType cache_dtype,  // (n_seqs, n_kv_heads, n_ctx, head_dim)
               const int32_t* seq, const int32_t* pos,               // (M)
               int64_t M, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t n_ctx);

}  // namespace minfer::ref
