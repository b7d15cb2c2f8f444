#include "engine/kv_cache.h"

#include <cstdint>

#include "core/checked.h"
#include "core/error.h"

namespace minfer {

uint64_t KvCache::bytes_needed(int64_t n_layers, int64_t n_seqs, int64_t n_ctx, int64_t kv_dim, DType dtype,
                               int64_t block_size) {
  block_size = block_size_for(n_ctx, block_size);
  return checked_product({2, uint64_t(n_layers), uint64_t(n_seqs), uint64_t(blocks_for(n_ctx, block_size)),
                          uint64_t(block_size), uint64_t(kv_dim), dtype_bytes(dtype, 1)},
                         "KV cache size");
}

KvCache::KvCache(Backend& backend, int64_t n_layers, int64_t n_seqs, int64_t n_ctx, int64_t n_kv_heads,
                 int64_t head_dim, DType dtype, int64_t block_size)
    : n_layers_(n_layers), n_seqs_(n_seqs), n_ctx_(n_ctx), block_size_(block_size_for(n_ctx, block_size)), n_kv_heads_(n_kv_heads),
      head_dim_(head_dim) {
  MINFER_CHECK(n_layers > 0 && n_seqs > 0 && n_ctx > 0 && n_kv_heads > 0 && head_dim > 0 && block_size > 0,
               "KV cache: bad shape ", n_layers, " layers x ", n_seqs, " sequences x ", n_kv_heads, " heads x ",
               n_ctx, " positions x ", head_dim, " in blocks of ", block_size);
  uint64_t bytes = bytes_needed(n_layers, n_seqs, n_ctx, n_kv_heads * head_dim, dtype, block_size);
  check_memory_fits(backend, bytes, "the KV cache for " + std::to_string(n_seqs) + " sequences of " +
                                        std::to_string(n_ctx) + " positions");
  const int64_t width = blocks_for(n_ctx, block_size_);
  const uint64_t blocks = checked_product({uint64_t(n_seqs), uint64_t(width)}, "KV cache blocks");
  MINFER_CHECK(blocks <= uint64_t(INT32_MAX), "KV cache: ", blocks, " blocks do not fit the i32 block table");
  n_blocks_ = int64_t(blocks);
  k_ = backend.empty({n_layers, n_blocks_ * n_kv_heads, block_size_, head_dim}, dtype);
  v_ = backend.empty({n_layers, n_blocks_ * n_kv_heads, block_size_, head_dim}, dtype);
  // Contiguous tables: sequence s owns blocks s * width .. s * width + width - 1, in order.
  Tensor host = backend.empty_host({n_seqs, width}, DType::i32);
  int32_t* entries = host.data_as<int32_t>();
  for (int64_t i = 0; i < n_blocks_; ++i) entries[i] = static_cast<int32_t>(i);
  table_ = backend.empty({n_seqs, width}, DType::i32);
  table_.copy_from(host);
}

}  // namespace minfer
