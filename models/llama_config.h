// The shape of a Llama-style decoder, as llama2.c's checkpoint header describes it, with the
// checks every header must pass before a byte is allocated and the sizes derived from it.
#pragma once

#include <cstdint>
#include <string>

namespace minfer {

struct LlamaConfig {
  int64_t dim = 0;          // width of the residual stream
  int64_t hidden_dim = 0;   // width of the SwiGLU feed-forward layer
  int64_t n_layers = 0;
  int64_t n_heads = 0;      // query heads
  int64_t n_kv_heads = 0;   // key/value heads (grouped-query attention when < n_heads)
  int64_t vocab_size = 0;
  int64_t n_ctx = 0;        // the longest context the model supports (llama2.c: seq_len)
  bool shared_classifier = true;  // the output classifier is the token embedding table

  int64_t head_dim() const { return dim / n_heads; }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }

  // Limits a header must respect: large enough for any model minfer targets, small enough that
  // every size below fits comfortably in 64 bits.
  static constexpr int64_t kMaxDim = 1 << 16;
  static constexpr int64_t kMaxHiddenDim = 1 << 18;
  static constexpr int64_t kMaxLayers = 1 << 10;
  static constexpr int64_t kMaxHeads = 1 << 10;
  static constexpr int64_t kMaxVocab = 1 << 22;
  static constexpr int64_t kMaxCtx = 1 << 20;

  // Throws Error("<source>: <field> = <value>, <the rule it breaks>") for the first bad field.
  void validate(const std::string& source) const;

  // Parameters of every weight, counted with overflow checks (call validate() first).
  uint64_t n_params() const;            // including the classifier if it is not shared
  uint64_t n_matmul_params() const;     // the weights each decode step reads: layers + classifier
  std::string describe() const;         // "dim 288, hidden 768, 6 layers, 6/6 heads, vocab 32000, ctx 256"
};

}  // namespace minfer
