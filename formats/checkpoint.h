// llama2.c checkpoints: reading (memory-mapped, validated before anything is allocated) and
// writing (for `minfer make-model`).
//
// Legacy v0 ("export.py --version 0", what run.c reads): 7 int32 header fields
//   dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
// (a negative vocab_size means the classifier is not shared with the embedding), then float32:
//   token_embedding (vocab, dim), rms_att (L, dim), wq (L, dim, dim), wk (L, kv_dim, dim),
//   wv (L, kv_dim, dim), wo (L, dim, dim), rms_ffn (L, dim), w1 (L, hidden, dim),
//   w2 (L, dim, hidden), w3 (L, hidden, dim), rms_final (dim),
//   freq_cis_real and freq_cis_imag (seq_len, head_dim / 2) each, unused here,
//   classifier (vocab, dim) when not shared.
// v1 ("--version 1"): a 256-byte header (uint32 magic 0x616b3432 "ak42", int32 version = 1,
// the 7 fields, uint8 shared_classifier, zero padding), then float32: rms_att (L, dim),
// rms_ffn (L, dim), rms_final (dim), token_embedding, wq, wk, wv, wo, w1, w2, w3 (shapes as
// above), classifier when not shared. No RoPE tables.
// Every matrix is [out_features, in_features], row-major.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "model/llama_config.h"
#include "model/llama_weights.h"

namespace minfer {

enum class CheckpointFormat { v0, v1 };

struct CheckpointLayout {
  LlamaConfig config;
  CheckpointFormat format = CheckpointFormat::v0;
  uint64_t header_bytes = 0;
  uint64_t file_bytes = 0;  // what the header implies the file's length is
};

// The bytes of a checkpoint of this shape and format (overflow-checked; call config.validate()).
uint64_t checkpoint_bytes(const LlamaConfig& config, CheckpointFormat format);

// Validates the header in data[0, size) and that the size is exactly what it implies. Throws
// Error naming `source`, the field, its value and the limit for the first problem found.
CheckpointLayout parse_checkpoint(const uint8_t* data, size_t size, const std::string& source);

// Views of every weight (f32) of a checkpoint already validated by parse_checkpoint; `owner`
// keeps the bytes alive.
LlamaHostWeights view_checkpoint(const uint8_t* data, const CheckpointLayout& layout,
                                 std::shared_ptr<void> owner);

// Maps `path` read-only and returns views of its weights. Refuses directories, unreadable and
// malformed files with one line naming the file.
LlamaHostWeights load_checkpoint(const std::string& path);

// Writes host weights (f32, contiguous, interleaved RoPE pairs) as a v0 or v1 checkpoint.
void write_checkpoint(const std::string& path, const LlamaHostWeights& weights,
                      CheckpointFormat format);

}  // namespace minfer
