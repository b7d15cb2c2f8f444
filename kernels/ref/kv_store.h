#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/host_device.h"

namespace minfer::ref {

// note: the one place the KV cache layout is written down. The cache is a pool of blocks of
// `block_size` positions; a layer's cache is (n_blocks, n_kv_heads, block_size, head_dim), and each
// sequence owns a row of a block table naming, for its positions p, the block that holds them:
// table[seq, p / block_size], at row p % block_size. Within a block the layout is head-major (why:
// engine/kv_cache.h): the keys of one KV head are block_size rows of head_dim, one contiguous run.
// A sequence's blocks need not be adjacent, in order, or its own: two sequences whose tables name
// the same block share its keys and values (a shared prefix). Every backend's kv_store,
// rope_kv_store and attention kernels index with kv_cache_offset.
struct KvBlockTable {
  const int32_t* blocks;  // (n_seqs, width): the block of position p of sequence s is blocks[s * width + p / block_size]
  int64_t width;          // entries per sequence: it holds at most width * block_size positions
  int64_t block_size;     // positions per block
  MINFER_HOST_DEVICE int64_t positions() const { return width * block_size; }
};

// The offset, in elements of a layer's cache, of the head_dim values of (sequence, KV head, position).
MINFER_HOST_DEVICE inline int64_t kv_cache_offset(const KvBlockTable& table, int64_t seq, int64_t kv_head,
                                                  int64_t pos, int64_t n_kv_heads, int64_t head_dim) {
  const int64_t block = table.blocks[seq * table.width + pos / table.block_size];
  return ((block * n_kv_heads + kv_head) * table.block_size + pos % table.block_size) * head_dim;
}

// Writes the keys and values of row m into the cache slots of its sequence and position, head
// by head: for every KV head h,
//   k_cache[block, h, pos[m] % block_size, :] = k[m, h, :], block = table[seq[m], pos[m] / block_size]
// and likewise for v. The cache may be f32, f16 or bf16 (rounded to nearest even on the way in).
void kv_store(void* k_cache, void* v_cache, DType cache_dtype,  // (n_blocks, n_kv_heads, block_size, head_dim) each
              const float* k, int64_t ld_k,                     // (M, n_kv_heads * head_dim)
              const float* v, int64_t ld_v,                     // (M, n_kv_heads * head_dim)
              const int32_t* seq, const int32_t* pos,           // (M)
              int64_t M, int64_t n_kv_heads, int64_t head_dim, const KvBlockTable& table);

}  // namespace minfer::ref
