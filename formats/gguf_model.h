// A Llama model in a GGUF file (general.architecture = "llama"), as llama.cpp's converter writes
// it: the hyperparameters under llama.* (embedding_length, feed_forward_length, block_count,
// attention.head_count, attention.head_count_kv, attention.key_length when heads are not
// embedding_length / head_count, attention.layer_norm_rms_epsilon, context_length,
// rope.freq_base, rope.scaling.type linear with rope.scaling.factor), the tensors under
// llama.cpp's names (token_embd, blk.N.attn_q, ..., output_norm, output; no output when the
// classifier is the embedding), rope_freqs.weight for Llama 3.1's frequency scaling, and the
// tokenizer under tokenizer.ggml.*. llama.cpp's converter already put q and k in interleaved
// RoPE order, the order minfer computes in.
#pragma once

#include <string>

#include "model/llama_weights.h"
#include "tokenizers/text_tokenizer.h"

namespace minfer {

class GgufFile;

LlamaHostWeights load_gguf_weights(const std::string& path);
// The model's config from a GGUF file's metadata (and rope_freqs tensor).
LlamaConfig read_gguf_config(const GgufFile& file);
// The vocabulary and tokenizer rules of a GGUF file's metadata.
GgufVocab read_gguf_vocab(const std::string& path);
GgufVocab read_gguf_vocab(const GgufFile& file);
// Whether the file carries a vocabulary (tokenizer.ggml.tokens).
bool gguf_has_vocab(const std::string& path);

}  // namespace minfer
