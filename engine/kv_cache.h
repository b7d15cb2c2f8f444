// The KV cache: keys and values of every layer, in a pool of fixed-size blocks of positions, and a
// block table naming each sequence's blocks. Allocated once when a decoder is created and never
// resized.
//
// note: layout (layers, blocks, kv_heads, block_size, head_dim), head-major within a block, and an
// i32 table (sequences, blocks per sequence) on the device (kernels/ref/kv_store.h writes the
// indexing down). Blocks are vLLM's PagedAttention: a sequence holds only the blocks its
// positions reach, a block can be named by two tables (a shared prefix), and a table's blocks need
// not be adjacent. Two ways to fill the tables:
//   - contiguous (n_blocks = 0, what generate, bench, speculative decoding, chat and perplexity
//     use): sequence s owns blocks s * width .. s * width + width - 1, in order, so the cache
//     reserves a whole context for every sequence, rounded up to whole blocks;
//   - paged (n_blocks > 0, the server's scheduler): a pool of n_blocks, every table entry -1 until
//     its owner sets the row (set_row), block by block as a sequence grows (engine/block_pool.h
//     says who holds what).
// Head-major within a block because attention reads, for one sequence and one KV head, the keys of
// positions 0..p: a block holds them as one run of block_size rows (position-major, as run.c keeps
// it, would read a head_dim slice out of every kv_dim-wide row). A decode step writes one head_dim
// row per head. The per-layer tensors are (blocks, kv_heads, block_size, head_dim).
//
// note: the kernels trust the table. On the device a -1 entry addresses the block before the
// layer's first: in layer l > 0 the last block of layer l - 1, which a write corrupts. So the
// decoder checks every pass's rows against the host's copy of the table (check_rows) before any
// op runs, whatever the backend; ref and cpu check again in their ops, CUDA's kernels cannot.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/backend.h"
#include "engine/communicator.h"
#include "core/tensor.h"

namespace minfer {

class KvCache {
 public:
  // Positions per block unless a caller asks for another size. vLLM's GPUs take 16; on the CPU a
  // block of one head is then 4 KiB (16 rows of 64 f32 values), and decode attention ran at about
  // 0.7x the unpaged layout's speed (a kernel call per 16 keys), against 0.9-1.1x at 64
  // (bench/results/NOTES.md, "A paged KV cache").
  static constexpr int64_t kDefaultBlockSize = 64;

  KvCache() = default;
  // Room for n_seqs sequences of n_ctx positions in blocks of block_size positions, or n_ctx if
  // fewer (a short context is one block, with nothing rounded up): n_seqs whole contexts with
  // contiguous tables when n_blocks is 0, else a pool of n_blocks and tables of -1. Throws Error
  // before allocating when the cache would not fit in the device's memory.
  KvCache(Backend& backend, int64_t n_layers, int64_t n_seqs, int64_t n_ctx, int64_t n_kv_heads,
          int64_t head_dim, DType dtype, int64_t block_size = kDefaultBlockSize, int64_t n_blocks = 0);

  Tensor k(int64_t layer) const { return layer_view(k_, layer); }  // (n_blocks, n_kv_heads, block_size, head_dim)
  Tensor v(int64_t layer) const { return layer_view(v_, layer); }
  const Tensor& block_table() const { return table_; }  // i32 (n_seqs, blocks_per_seq)
  int64_t n_layers() const { return n_layers_; }
  int64_t n_seqs() const { return n_seqs_; }
  int64_t n_ctx() const { return n_ctx_; }  // a sequence's context: the positions it may use (not rounded up)
  int64_t n_blocks() const { return n_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t blocks_per_seq() const { return table_.size(1); }
  int64_t n_kv_heads() const { return n_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t kv_dim() const { return n_kv_heads_ * head_dim_; }
  DType dtype() const { return k_.dtype(); }
  size_t bytes() const { return k_.nbytes() + v_.nbytes(); }

  // Paged tables: sequence `seq`'s row becomes blocks[0..n), the rest -1 (on the host; upload()
  // brings the table to the device). blocks_held(seq) is the n of its row.
  void set_row(int64_t seq, const int32_t* blocks, int64_t n);
  int64_t blocks_held(int64_t seq) const { return held_[size_t(seq)]; }
  // Throws Error (one line, naming `op`) unless every row (seq[m], pos[m]) of a pass, m < rows,
  // is a sequence of the table at a position it holds, whose blocks from position 0 to pos[m]
  // (every key attention may read) are blocks of the pool, by the host's copy of the table.
  void check_rows(const char* op, const int32_t* seq, const int32_t* pos, int64_t rows) const;
  // Copies the table to the device if a row changed since the last upload (asynchronously, on
  // the backend's stream: call it only while no pass reads the table, and never inside recorded
  // work, whose copy would run only when a recording is launched, if ever). The change is
  // forgotten only once the copy is enqueued.
  void upload(Backend& backend);
  // Whether a row changed since the last upload, and, for tensor parallelism with rank 0 in charge
  // (Decoder::lead), rank 0's host table on every rank: a collective, which every rank calls when
  // rank 0's table changed. It counts as a change on every rank (the next upload copies it); the
  // other ranks count a row's blocks up to its first -1.
  bool table_changed() const { return table_changed_; }
  void broadcast_table(Communicator& ranks);
  // Copies block `src`'s keys and values, in every layer, into block `dst` (a partly filled
  // shared block copied before it is written), on the backend's stream.
  void copy_block(Backend& backend, int32_t dst, int32_t src) const;

  // The block size a context of n_ctx positions gets, the blocks a sequence of n_ctx positions
  // needs, and the bytes of a cache of this shape, n_seqs whole contexts or n_blocks (overflow-checked).
  static int64_t block_size_for(int64_t n_ctx, int64_t block_size) { return n_ctx < block_size ? n_ctx : block_size; }
  static int64_t blocks_for(int64_t n_ctx, int64_t block_size) { return (n_ctx + block_size - 1) / block_size; }
  static uint64_t bytes_needed(int64_t n_layers, int64_t n_seqs, int64_t n_ctx, int64_t kv_dim, DType dtype,
                               int64_t block_size = kDefaultBlockSize, int64_t n_blocks = 0);
  // The bytes of one block in every layer, keys and values.
  static uint64_t bytes_per_block(int64_t n_layers, int64_t block_size, int64_t kv_dim, DType dtype);

 private:
  Tensor layer_view(const Tensor& all, int64_t layer) const {
    return all.select(0, layer).reshape({n_blocks_, n_kv_heads_, block_size_, head_dim_});
  }
  Tensor k_, v_;  // (n_layers, n_blocks * n_kv_heads, block_size, head_dim)
  Tensor table_;       // (n_seqs, blocks_per_seq) i32, on the device
  Tensor host_table_;  // the same on the host, where rows are set
  std::vector<int64_t> held_;  // per sequence: the blocks its row names
  bool table_changed_ = false;
  int64_t n_layers_ = 0, n_seqs_ = 0, n_ctx_ = 0, n_blocks_ = 0, block_size_ = 0, n_kv_heads_ = 0, head_dim_ = 0;
};

}  // namespace minfer
