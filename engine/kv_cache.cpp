#include "engine/kv_cache.h"

#include <cstdint>

#include "core/checked.h"
#include "core/error.h"
#include "engine/op_checks.h"

namespace minfer {

uint64_t KvCache::bytes_needed(int64_t n_layers, int64_t n_seqs, int64_t n_ctx, int64_t kv_dim, DType dtype,
                               int64_t block_size, int64_t n_blocks) {
  block_size = block_size_for(n_ctx, block_size);
  const uint64_t blocks = n_blocks > 0 ? uint64_t(n_blocks)
                                       : checked_product({uint64_t(n_seqs), uint64_t(blocks_for(n_ctx, block_size))},
                                                         "KV cache blocks");
  return checked_product({blocks, bytes_per_block(n_layers, block_size, kv_dim, dtype)}, "KV cache size");
}

uint64_t KvCache::bytes_per_block(int64_t n_layers, int64_t block_size, int64_t kv_dim, DType dtype) {
  return checked_product({2, uint64_t(n_layers), uint64_t(block_size), uint64_t(kv_dim), dtype_bytes(dtype, 1)},
                         "KV cache block size");
}

KvCache::KvCache(Backend& backend, int64_t n_layers, int64_t n_seqs, int64_t n_ctx, int64_t n_kv_heads,
                 int64_t head_dim, DType dtype, int64_t block_size, int64_t n_blocks)
    : n_layers_(n_layers), n_seqs_(n_seqs), n_ctx_(n_ctx), block_size_(block_size_for(n_ctx, block_size)), n_kv_heads_(n_kv_heads),
      head_dim_(head_dim) {
  MINFER_CHECK(n_layers > 0 && n_seqs > 0 && n_ctx > 0 && n_kv_heads > 0 && head_dim > 0 && block_size > 0 &&
                   n_blocks >= 0,
               "KV cache: bad shape ", n_layers, " layers x ", n_seqs, " sequences x ", n_kv_heads, " heads x ",
               n_ctx, " positions x ", head_dim, " in blocks of ", block_size, " (", n_blocks, " blocks)");
  const int64_t width = blocks_for(n_ctx, block_size_);
  const bool contiguous = n_blocks == 0;
  const uint64_t blocks =
      contiguous ? checked_product({uint64_t(n_seqs), uint64_t(width)}, "KV cache blocks") : uint64_t(n_blocks);
  MINFER_CHECK(blocks <= uint64_t(INT32_MAX), "KV cache: ", blocks, " blocks do not fit the i32 block table");
  const uint64_t bytes = bytes_needed(n_layers, n_seqs, n_ctx, n_kv_heads * head_dim, dtype, block_size, n_blocks);
  check_memory_fits(backend, bytes,
                    contiguous ? "the KV cache for " + std::to_string(n_seqs) + " sequences of " +
                                     std::to_string(n_ctx) + " positions"
                               : "the KV cache of " + std::to_string(n_blocks) + " blocks of " +
                                     std::to_string(block_size_) + " positions");
  n_blocks_ = int64_t(blocks);
  k_ = backend.empty({n_layers, n_blocks_ * n_kv_heads, block_size_, head_dim}, dtype);
  v_ = backend.empty({n_layers, n_blocks_ * n_kv_heads, block_size_, head_dim}, dtype);
  // Contiguous tables: sequence s owns blocks s * width .. s * width + width - 1, in order.
  host_table_ = backend.empty_host({n_seqs, width}, DType::i32);
  int32_t* entries = host_table_.data_as<int32_t>();
  for (int64_t i = 0; i < n_seqs * width; ++i) entries[i] = contiguous ? static_cast<int32_t>(i) : -1;
  held_.assign(size_t(n_seqs), contiguous ? width : 0);
  table_ = backend.empty({n_seqs, width}, DType::i32);
  table_.copy_from(host_table_);
}

void KvCache::set_row(int64_t seq, const int32_t* blocks, int64_t n) {
  const int64_t width = blocks_per_seq();
  MINFER_CHECK(seq >= 0 && seq < n_seqs_ && n >= 0 && n <= width, "KV cache: ", n, " blocks for sequence ", seq,
               " (", n_seqs_, " sequences of at most ", width, ")");
  int32_t* row = host_table_.data_as<int32_t>() + seq * width;
  for (int64_t j = 0; j < width; ++j) {
    const int32_t block = j < n ? blocks[j] : -1;
    MINFER_CHECK(block >= -1 && block < n_blocks_, "KV cache: block ", block, " outside the pool of ", n_blocks_);
    row[j] = block;
  }
  held_[size_t(seq)] = n;
  table_changed_ = true;
}

void KvCache::check_rows(const char* op, const int32_t* seq, const int32_t* pos, int64_t rows) const {
  const op_checks::CacheShape shape{n_blocks_, n_kv_heads_,     block_size_, head_dim_,
                                    n_seqs_,   blocks_per_seq(), host_table_.data_as<int32_t>()};
  op_checks::positions(op, seq, pos, rows, shape, /*keys=*/true);
}

void KvCache::upload(Backend& backend) {
  if (!table_changed_) return;
  backend.copy_async(table_, host_table_);
  table_changed_ = false;
}

void KvCache::broadcast_table(Communicator& ranks) {
  ranks.broadcast(host_table_, 0);
  table_changed_ = true;
  if (ranks.rank() == 0) return;  // rank 0's counts are set_row's
  const int64_t width = blocks_per_seq();
  const int32_t* table = host_table_.data_as<int32_t>();
  for (int64_t s = 0; s < n_seqs_; ++s) {  // a row is its blocks, then -1 (set_row)
    int64_t n = 0;
    while (n < width && table[s * width + n] != -1) ++n;
    held_[size_t(s)] = n;
  }
}

void KvCache::copy_block(Backend& backend, int32_t dst, int32_t src) const {
  MINFER_CHECK(dst >= 0 && dst < n_blocks_ && src >= 0 && src < n_blocks_, "KV cache: copy of block ", src,
               " into ", dst, " outside the pool of ", n_blocks_);
  for (int64_t l = 0; l < n_layers_; ++l)
    for (const Tensor* all : {&k_, &v_}) {
      const Tensor layer = all->select(0, l);
      backend.copy_async(layer.slice(0, dst * n_kv_heads_, (dst + 1) * n_kv_heads_),
                         layer.slice(0, src * n_kv_heads_, (src + 1) * n_kv_heads_));
    }
}

}  // namespace minfer
