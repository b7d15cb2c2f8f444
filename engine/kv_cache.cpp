#include "engine/kv_cache.h"

#include "core/checked.h"
#include "core/error.h"

namespace minfer {

uint64_t KvCache::bytes_needed(int64_t n_layers, int64_t n_seqs, int64_t n_ctx, int64_t kv_dim,
                               DType dtype) {
  return checked_product({2, uint64_t(n_layers), uint64_t(n_seqs), uint64_t(n_ctx), uint64_t(kv_dim),
                          dtype_bytes(dtype, 1)},
                         "KV cache size");
}

KvCache::KvCache(Backend& backend, int64_t n_layers, int64_t n_seqs, int64_t n_ctx, int64_t n_kv_heads,
                 int64_t head_dim, DType dtype)
    : n_layers_(n_layers), n_seqs_(n_seqs), n_ctx_(n_ctx), n_kv_heads_(n_kv_heads), head_dim_(head_dim) {
  MINFER_CHECK(n_layers > 0 && n_seqs > 0 && n_ctx > 0 && n_kv_heads > 0 && head_dim > 0,
               "KV cache: bad shape ", n_layers, " layers x ", n_seqs, " sequences x ", n_kv_heads,
               " heads x ", n_ctx, " positions x ", head_dim);
  uint64_t bytes = bytes_needed(n_layers, n_seqs, n_ctx, n_kv_heads * head_dim, dtype);
  check_memory_fits(backend, bytes, "the KV cache for " + std::to_string(n_seqs) + " sequences of " +
                                        std::to_string(n_ctx) + " positions");
  k_ = backend.empty({n_layers, n_seqs * n_kv_heads, n_ctx, head_dim}, dtype);
  v_ = backend.empty({n_layers, n_seqs * n_kv_heads, n_ctx, head_dim}, dtype);
}

}  // namespace minfer
