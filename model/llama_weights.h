// The weights of a Llama model on the host, as every loader hands them to LlamaModel: views into
// a memory-mapped file (llama2.c, safetensors, GGUF) or memory of their own (tests, make-model),
// in the dtype they are stored in.
//
// note: the layout is the one minfer computes in: matrices are (out_features, in_features), and
// the rows of wq and wk hold each head's dimensions as llama2.c and GGUF's llama order them, in
// interleaved RoPE pairs (0, 1), (2, 3), ... Hugging Face checkpoints store q and k for the
// rotate-half convention instead, pairs (j, j + head_dim / 2); a loader of such a file sets
// `rotate_half`, and LlamaModel permutes those rows (and the q, k biases and norms with them) as
// it uploads them. The permutation is exact (attention's dot products do not see an order that q
// and k share), costs nothing at run time, and keeps one RoPE kernel for every format.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "model/llama_config.h"

namespace minfer {

struct LlamaHostWeights {
  LlamaConfig config;
  Tensor token_embedding;  // (vocab, dim)
  Tensor classifier;       // (vocab, dim); the embedding table itself when shared
  Tensor rms_final;        // (dim)
  struct Layer {
    Tensor rms_att;        // (dim)
    Tensor wq;             // (q_dim, dim)
    Tensor wk;             // (kv_dim, dim)
    Tensor wv;             // (kv_dim, dim)
    Tensor bq, bk, bv;     // (q_dim), (kv_dim), (kv_dim): with config.qkv_bias only
    Tensor q_norm, k_norm; // (head_dim) each: with config.qk_norm only
    Tensor wo;             // (dim, q_dim)
    Tensor post_att_norm;  // (dim): with config.post_norms only
    Tensor rms_ffn;        // (dim)
    Tensor w1;             // (hidden, dim): the gate
    Tensor w2;             // (dim, hidden): down
    Tensor w3;             // (hidden, dim): up
    Tensor post_ffn_norm;  // (dim): with config.post_norms only
    // A layer of experts (config.layer_has_experts): its router and each expert's matrices, each
    // kind in one type; hidden above is then config.ffn_hidden(layer), the shared expert's width,
    // and w1, w2, w3 are absent where it has none.
    Tensor router;                   // (n_experts, dim)
    std::vector<Tensor> w1_experts;  // n_experts of (expert_hidden, dim): the gates
    std::vector<Tensor> w2_experts;  // n_experts of (dim, expert_hidden): down
    std::vector<Tensor> w3_experts;  // n_experts of (expert_hidden, dim): up
    Tensor shared_gate;              // (1, dim): with a shared expert only
  };
  std::vector<Layer> layers;
  bool rotate_half = false;  // wq, wk rows in Hugging Face's rotate-half order (see above)
  // Added to every RMSNorm weight as LlamaModel uploads it: 1 for Gemma's Hugging Face checkpoints,
  // whose RMSNorm computes x (1 + w); GGUF's converter stores 1 + w already (0 there, as for Llama).
  float norm_weight_offset = 0.0f;
  // Called with each tensor once LlamaModel has copied it: a memory-mapped loader drops the
  // file's pages (madvise), so that loading peaks near one copy of the weights, not two.
  std::function<void(const Tensor&)> release;
  std::shared_ptr<void> owner;  // keeps the mapping (or the memory) alive
  // A digest of the file's header and tensor table (digest_bytes: GGUF's bytes before its tensor
  // data; config.json and each safetensors header; a llama2.c header and the file's length), which
  // the ranks of a split compare before anything else; 0 where nothing was read from a file.
  uint64_t header_digest = 0;

  // Checks that every tensor is a dense 2-D (or 1-D for norms and biases) host tensor of the shape
  // the config implies, of a float or quantized type (not i32), and that the biases, the q, k
  // norms, the post norms, the experts and the shared expert are there exactly when the config
  // says so (qkv_bias, qk_norm, post_norms, layer_has_experts, shared_expert_hidden_dim), each
  // expert matrix's experts of one type; Error naming the tensor otherwise.
  void validate(const std::string& source) const;
};

}  // namespace minfer
