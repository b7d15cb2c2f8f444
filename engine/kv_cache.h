// The KV cache: keys and values of every layer for every position of every sequence, allocated
// once when a decoder is created and never resized.
//
// note: layout (layers, sequences, kv_heads, positions, head_dim), head-major. Attention reads,
// for one sequence and one KV head, the keys of positions 0..p: head-major makes that one
// contiguous stream (position-major, as run.c keeps it, would read a head_dim slice out of every
// kv_dim-wide row). A decode step writes one head_dim row per head instead of one kv_dim row.
// The per-layer tensors are (sequences, kv_heads, positions, head_dim).
#pragma once

#include <cstdint>

#include "engine/backend.h"
#include "core/tensor.h"

namespace minfer {

class KvCache {
 public:
  KvCache() = default;
  // Throws Error before allocating when the cache would not fit in the device's memory.
  KvCache(Backend& backend, int64_t n_layers, int64_t n_seqs, int64_t n_ctx, int64_t n_kv_heads,
          int64_t head_dim, DType dtype);

  Tensor k(int64_t layer) const { return layer_view(k_, layer); }  // (n_seqs, n_kv_heads, n_ctx, head_dim)
  Tensor v(int64_t layer) const { return layer_view(v_, layer); }
  int64_t n_layers() const { return n_layers_; }
  int64_t n_seqs() const { return n_seqs_; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_kv_heads() const { return n_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t kv_dim() const { return n_kv_heads_ * head_dim_; }
  DType dtype() const { return k_.dtype(); }
  size_t bytes() const { return k_.nbytes() + v_.nbytes(); }

  // The bytes a cache of this shape would take (overflow-checked).
  static uint64_t bytes_needed(int64_t n_layers, int64_t n_seqs, int64_t n_ctx, int64_t kv_dim,
                               DType dtype);

 private:
  Tensor layer_view(const Tensor& all, int64_t layer) const {
    return all.select(0, layer).reshape({n_seqs_, n_kv_heads_, n_ctx_, head_dim_});
  }
  Tensor k_, v_;  // (n_layers, n_seqs * n_kv_heads, n_ctx, head_dim)
  int64_t n_layers_ = 0, n_seqs_ = 0, n_ctx_ = 0, n_kv_heads_ = 0, head_dim_ = 0;
};

}  // namespace minfer
