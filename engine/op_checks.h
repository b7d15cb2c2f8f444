// Shape, dtype and device checks for the backend ops, shared by every backend so that they refuse
// exactly the same calls. Each returns the sizes the kernels need.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/ref/attention.h"

namespace minfer::op_checks {

struct Rows {  // an activation tensor as (rows, cols) with a row stride
  int64_t rows, cols, ld;
};

// A 2-D f32 tensor on `device` with dense rows.
Rows activation(const char* op, const char* name, const Tensor& t, DeviceKind device);
void same_rows(const char* op, const Rows& a, const char* a_name, const Rows& b,
               const char* b_name);
// An i32 vector of `rows` elements, contiguous, on `device`.
void index_vector(const char* op, const char* name, const Tensor& t, int64_t rows,
                  DeviceKind device);
// A dense 2-D weight of any float or quantized type (not i32) on `device`.
void weight(const char* op, const char* name, const Tensor& t, DeviceKind device);

struct CacheShape {
  int64_t n_blocks, n_kv_heads, block_size, head_dim;
  int64_t n_seqs, width;  // the block table's rows and entries per row
  const int32_t* blocks;  // the block table's data, on the caches' device
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  // The positions a table row can address: a sequence's context (KvCache::n_ctx()) rounded up to
  // whole blocks, so up to block_size - 1 more than the decoder lets a sequence use (100 in blocks
  // of 64: 128). op_checks::positions() bounds pos by it; CUDA's three-pass scores buffer is sized by it.
  int64_t n_ctx() const { return width * block_size; }  // = KvBlockTable::positions()
  ref::KvBlockTable table() const { return {blocks, width, block_size}; }
};
// Two same-shaped contiguous (blocks, kv_heads, block_size, head_dim) caches of f32, f16 or bf16,
// and an i32 (sequences, width) block table beside them.
CacheShape kv_cache(const char* op, const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table,
                    DeviceKind device);
// Host-side check that every (seq, pos) pair addresses a cache slot: a sequence of the table, a
// position it can hold, and a block of the pool at that position's entry. With `keys`, also
// every block attention reads for the row (from attention_first_key(pos, window) on).
void positions(const char* op, const int32_t* seq, const int32_t* pos, int64_t rows,
               const CacheShape& cache, bool keys = false, int64_t window = 0);

struct AttentionShape {
  int64_t M, n_heads, n_kv_heads, head_dim;
  CacheShape cache;
};
void rope_table(const char* op, const Tensor& table, int64_t head_dim, DeviceKind device);
void head_dim(const char* op, const Rows& x, int64_t head_dim);

void gather_rows(const Tensor& out, const Tensor& table, const Tensor& ids, DeviceKind device);
// Returns the groups each row is normalised in: cols / weight's width (Qwen3's heads), usually 1.
int64_t rmsnorm(const Tensor& out, const Tensor& x, const Tensor& weight, DeviceKind device);
// packed_ok: the backend multiplies weights packed by its own pack_weights (the CPU's packed16);
// elsewhere a packed w is refused.
void matmul(const Tensor& out, const Tensor& x, const Tensor& w, DeviceKind device, bool packed_ok = false);
void rope(const Tensor& x, const Tensor& pos, const Tensor& table, int64_t head_dim,
          DeviceKind device);
// Host-side check that every position has a row in the rope table.
void table_positions(const char* op, const int32_t* pos, int64_t rows, const Tensor& table);
void residual_rmsnorm(const Tensor& out, const Tensor& x, const Tensor& delta, const Tensor& weight,
                      DeviceKind device);
CacheShape rope_kv_store(const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table,
                         const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& seq,
                         const Tensor& pos, const Tensor& table, int64_t head_dim, DeviceKind device);
CacheShape kv_store(const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table,
                    const Tensor& k, const Tensor& v, const Tensor& seq, const Tensor& pos,
                    DeviceKind device);
AttentionShape attention(const Tensor& out, const Tensor& q, const Tensor& k_cache,
                         const Tensor& v_cache, const Tensor& block_table, const Tensor& seq,
                         const Tensor& pos, const AttentionSpec& spec, DeviceKind device);
void elementwise(const char* op, const Tensor& out, const Tensor& a, const Tensor& b,
                 DeviceKind device);
// out = act(gate) * up, gate like up or of one column: returns the gate's column step for the
// kernels, 1, or 0 for a gate of one column.
int64_t glu(const Tensor& out, const Tensor& gate, const Tensor& up, DeviceKind device);
// ids (M, k) i32 and weights (M, k) f32, dense, for logits (M, E) with 0 < k <= E.
void route_experts(const Tensor& ids, const Tensor& weights, const Tensor& logits, DeviceKind device);
struct ExpertsShape {
  int64_t M, k, E, N, K;
  bool x_per_slot;  // x has a row per slot (M k rows), not per row (M)
};
// Backend::matmul_experts's shapes (engine/backend.h); weights may be undefined. packed_ok as for
// matmul. Ids are device data: expert_ids() checks them where the host can read them.
ExpertsShape matmul_experts(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& ids,
                            const Tensor& weights, DeviceKind device, bool packed_ok = false);
// Host-side check that each of the n ids names one of E experts.
void expert_ids(const char* op, const int32_t* ids, int64_t n, int64_t E);
// out = a + b, with b (M, D) like a, or a row (D) added to every row (a bias): returns b's row
// stride for the kernels, 0 for a row.
int64_t add(const Tensor& out, const Tensor& a, const Tensor& b, DeviceKind device);
void argmax(const Tensor& out, const Tensor& x, DeviceKind device);
void fill(const Tensor& t, DeviceKind device);

// Unpacking a checked tensor into the raw arguments the kernels take.
inline float* f32(const Tensor& t) { return t.data_as<float>(); }
inline const int32_t* i32(const Tensor& t) { return t.data_as<int32_t>(); }
// The row stride of a 2-D activation (its width when there is a single row).
inline int64_t ld(const Tensor& t) { return t.size(0) <= 1 ? t.size(1) : t.stride(0); }
// x must start on a kSumAlignment boundary: CUDA's kernel reads it as float4 (kernels/cuda/sum.cu).
constexpr size_t kSumAlignment = 16;
void sum(const Tensor& out, const Tensor& x, DeviceKind device);

}  // namespace minfer::op_checks
