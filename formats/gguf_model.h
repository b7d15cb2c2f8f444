// A Llama model in a GGUF file, as llama.cpp's converter writes it: general.architecture "llama",
// or "qwen2", "qwen3", "phi3", "gemma3", "qwen3moe", "olmoe" or "qwen2moe" (gguf_model.cpp's table
// of their differences: biases, q and k norms, fused tensors, rotate-half order, Gemma 3's, the
// experts' renormalisation; a llama with ARCH.expert_count is Mixtral); the hyperparameters under
// ARCH.* (expert_count, expert_used_count, expert_feed_forward_length,
// expert_shared_feed_forward_length for a mixture of experts; embedding_length,
// feed_forward_length, block_count, attention.head_count, attention.head_count_kv,
// attention.key_length when heads are not embedding_length / head_count,
// attention.layer_norm_rms_epsilon, context_length, rope.freq_base, rope.scaling.type linear with
// rope.scaling.factor, attention.sliding_window: every layer's window, or Gemma 3's sliding
// layers' with attention.sliding_window_pattern and rope.freq_base_swa), the tensors under
// llama.cpp's names (token_embd, blk.N.attn_q, ..., output_norm, output; no output when the
// classifier is the embedding), rope_freqs.weight for Llama 3.1's frequency scaling, and the
// tokenizer under tokenizer.ggml.*. For llama, llama.cpp's converter already put q and k in
// interleaved RoPE order, the order minfer computes in; the others keep Hugging Face's
// rotate-half order, which LlamaModel permutes at upload (model/llama_weights.h).
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
