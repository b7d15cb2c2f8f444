#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/host_device.h"
#include "kernels/ref/kv_store.h"

namespace minfer {

// Two algorithms compute the attention below, equal up to rounding. The CPU and CUDA backends run
// either (`--kernels unfused` picks the first, `fused` the second: engine/model.h's Kernels). The
// reference backend runs neither: it ignores the choice and computes ref::attention below, in
// double, each output rounded to f32 once.
//   three_pass      scores = q K^T * scale for every key the row sees (0..pos, or its window's),
//                   then softmax, then the probability-weighted sum of V: three passes, the
//                   scores in a buffer between.
//   online_softmax  one pass over the keys in blocks, keeping a running max and sum and
//                   rescaling the partial output when the max grows (FlashAttention's
//                   recurrence): no buffer holds a row's scores, a block's live in registers,
//                   L1 or shared memory while it is used. On CUDA a row's keys are split into
//                   chunks across blocks whose partial states merge (flash-decoding; the more
//                   rows and heads, the fewer chunks), except in steps of more than
//                   64 rows with an f16 or bf16 cache and a head_dim of 64 or 128, where each
//                   tile of 64 rows that are one prompt's consecutive positions runs on Tensor
//                   Cores instead (cuda_attention, engine/cuda_choices.h).
enum class AttentionAlgorithm { three_pass, online_softmax };

inline const char* attention_algorithm_name(AttentionAlgorithm a) {
  return a == AttentionAlgorithm::three_pass ? "three-pass" : "online-softmax";
}

// What a model declares about one layer's attention, beside its tensors' shapes:
struct AttentionSpec {
  int64_t head_dim = 0;
  // The factor on q . k: 0 means 1 / sqrt(head_dim); Gemma declares query_pre_attn_scalar^(-1/2),
  // which need not follow its head width.
  float scale = 0.0f;
  // Keys a row sees, its own included: a row at position p attends to p - window < t <= p, a
  // sliding window (Gemma 3's local layers, Mistral v0.1); 0 means every key up to p.
  int64_t window = 0;
  float score_scale() const;  // scale, or 1 / sqrt(head_dim) where it is 0
};

// The first key a row at position `pos` attends to under a window of `window` keys (0: none).
MINFER_HOST_DEVICE inline int64_t attention_first_key(int64_t pos, int64_t window) {
  return window > 0 && pos >= window ? pos - window + 1 : 0;
}

// The arguments of one attention call, as the CPU and CUDA kernels take them (see ref::attention
// for the math).
struct AttentionArgs {
  float* out;                   // (M, n_heads * head_dim), rows ld_out apart
  int64_t ld_out;
  const float* q;               // (M, n_heads * head_dim), rows ld_q apart
  int64_t ld_q;
  const void* k_cache;          // (n_blocks, n_kv_heads, block_size, head_dim): ref::kv_cache_offset
  const void* v_cache;          // (n_blocks, n_kv_heads, block_size, head_dim)
  DType cache_dtype;
  ref::KvBlockTable table;      // each sequence's blocks
  const int32_t* seq;           // (M)
  const int32_t* pos;           // (M)
  int64_t M, n_heads, n_kv_heads, head_dim;
  float scale;                  // of q . k (AttentionSpec::score_scale)
  int64_t window;               // AttentionSpec::window: row m sees keys attention_first_key .. pos[m]
};

}  // namespace minfer

namespace minfer::ref {

// Causal attention over a KV cache of blocks (kv_store.h). Row m is query position pos[m] of
// sequence seq[m]; it attends to positions first .. pos[m] of that sequence's cache (already
// written, its own included), first = attention_first_key(pos[m], window): 0 without a window.
// Head h reads KV head h / (n_heads / n_kv_heads) (grouped-query attention); key t of the sequence
// is found through its block table (kv_cache_offset):
//   score[t] = q[m, h, :] . k_cache[seq, kv_head, t, :] * scale
//   out[m, h, :] = sum_t softmax(score)[t] * v_cache[seq, kv_head, t, :]
void attention(float* out, int64_t ld_out,                           // (M, n_heads * head_dim)
               const float* q, int64_t ld_q,                         // (M, n_heads * head_dim)
               const void* k_cache, const void* v_cache, DType cache_dtype,  // (n_blocks, n_kv_heads, block_size, head_dim)
               const KvBlockTable& table,                            // (n_seqs, table.width)
               const int32_t* seq, const int32_t* pos,               // (M)
               int64_t M, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
               float scale, int64_t window);

}  // namespace minfer::ref
