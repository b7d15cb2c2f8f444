// The KV cache: keys and values of every layer for every position of every sequence, allocated
// once when a decoder is created and never resized.
//
// note: layout (layers, sequences, positions, kv_dim), position-major within a sequence as in
// run.c: a decode step appends one row per sequence, and attention reads a sequence's keys as
// one contiguous (positions, kv_dim) block.
#pragma once

#include <cstdint>

#include "engine/backend.h"
#include "engine/tensor.h"

namespace minfer {

class KvCache {
 public:
  KvCache() = default;
  // Throws Error before allocating when the cache would not fit in the device's memory.
  KvCache(Backend& backend, int64_t n_layers, int64_t n_seqs, int64_t n_ctx, int64_t kv_dim,
          DType dtype);

  Tensor k(int64_t layer) const { return k_.select(0, layer); }  // (n_seqs, n_ctx, kv_dim)
  Tensor v(int64_t layer) const { return v_.select(0, layer); }
  int64_t n_layers() const { return n_layers_; }
  int64_t n_seqs() const { return n_seqs_; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t kv_dim() const { return kv_dim_; }
  DType dtype() const { return k_.dtype(); }
  size_t bytes() const { return k_.nbytes() + v_.nbytes(); }
  // Bytes of keys and values one decode step reads for a sequence that has `n_past` positions.
  uint64_t bytes_read(int64_t n_past) const;

  // The bytes a cache of this shape would take (overflow-checked).
  static uint64_t bytes_needed(int64_t n_layers, int64_t n_seqs, int64_t n_ctx, int64_t kv_dim,
                               DType dtype);

 private:
  Tensor k_, v_;  // (n_layers, n_seqs, n_ctx, kv_dim)
  int64_t n_layers_ = 0, n_seqs_ = 0, n_ctx_ = 0, kv_dim_ = 0;
};

}  // namespace minfer
