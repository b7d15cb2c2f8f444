#include "engine/kv_cache.h"

#include "engine/checked.h"
#include "engine/error.h"

namespace minfer {

uint64_t KvCache::bytes_needed(int64_t n_layers, int64_t n_seqs, int64_t n_ctx, int64_t kv_dim,
                               DType dtype) {
  return checked_product({2, uint64_t(n_layers), uint64_t(n_seqs), uint64_t(n_ctx), uint64_t(kv_dim),
                          uint64_t(dtype_size(dtype))},
                         "KV cache size");
}

KvCache::KvCache(Backend& backend, int64_t n_layers, int64_t n_seqs, int64_t n_ctx, int64_t kv_dim,
                 DType dtype)
    : n_layers_(n_layers), n_seqs_(n_seqs), n_ctx_(n_ctx), kv_dim_(kv_dim) {
  MINFER_CHECK(n_layers > 0 && n_seqs > 0 && n_ctx > 0 && kv_dim > 0, "KV cache: bad shape ",
               n_layers, " x ", n_seqs, " x ", n_ctx, " x ", kv_dim);
  uint64_t bytes = bytes_needed(n_layers, n_seqs, n_ctx, kv_dim, dtype);
  size_t free_bytes = 0, total_bytes = 0;
  if (backend.pool().upstream().memory_info(&free_bytes, &total_bytes) && bytes > free_bytes)
    fail("the KV cache for ", n_seqs, " sequences of ", n_ctx, " positions needs ", bytes,
         " bytes, ", free_bytes, " of ", total_bytes, " are free on ", device_name(backend.device()));
  k_ = backend.empty({n_layers, n_seqs, n_ctx, kv_dim}, dtype);
  v_ = backend.empty({n_layers, n_seqs, n_ctx, kv_dim}, dtype);
}

uint64_t KvCache::bytes_read(int64_t n_past) const {
  return uint64_t(2) * uint64_t(n_layers_) * uint64_t(n_past) * uint64_t(kv_dim_) *
         uint64_t(dtype_size(dtype()));
}

}  // namespace minfer
