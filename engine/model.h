// What the decoder needs from a model: a forward pass over a batch of rows that writes keys and
// values into a KV cache and produces the logits of selected rows. model/llama.h implements it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/kv_cache.h"
#include "core/tensor.h"

namespace minfer {

// Row m of a forward pass is token tokens[m] at position pos[m] of sequence seq[m]. Rows of one
// sequence are in position order, and a sequence's earlier positions are in the cache already or
// earlier in the batch. All tensors are i32 on the model's device.
struct ForwardBatch {
  Tensor tokens;      // (M)
  Tensor seq;         // (M)
  Tensor pos;         // (M)
  Tensor logit_rows;  // (R): the rows whose logits are wanted, in increasing order
};

struct ModelInfo {
  std::string name;            // "preset:stories15M" or the checkpoint's path
  std::string shape;           // the config in words
  int64_t vocab_size = 0;
  int64_t n_ctx = 0;           // the model's context: the longest it supports (LlamaConfig::n_ctx)
  int64_t n_layers = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  uint64_t n_params = 0;
  uint64_t weight_bytes = 0;   // every weight as stored on the device
  // Of them, those every decode step reads: matrices (but the experts'), classifier, norms.
  uint64_t step_weight_bytes = 0;
  uint64_t embedding_row_bytes = 0;  // one row of the embedding table (a step reads one per sequence)
  // A mixture of experts: one expert's matrices summed over the layers of experts; a step reads as
  // many experts as its rows choose (LlamaConfig::expected_experts_read).
  uint64_t expert_bytes = 0;
  DType dtype = DType::f32;    // of the matrices and the embedding table (of most weights, if mixed)
  std::string weight_types;    // a mix: each type's share of the weights ("q4_k 80%, q6_k 20%"); empty if one
  int32_t bos_id = 1;          // -1: none
  std::vector<int32_t> stop_ids;  // tokens that end a generation
};

// Whether `token` is one of `stop_ids` (ModelInfo::stop_ids, LlamaConfig::stop_ids).
inline bool is_stop_token(const std::vector<int32_t>& stop_ids, int32_t token) {
  return std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end();
}

// The kernels a forward pass runs. `fused`: one matmul for Q, K and V, RoPE fused into the KV
// store, the residual add fused into the next RMSNorm, one matmul for the gate and up
// projections, online-softmax attention. `unfused`: the same model as the plain composition of
// single ops (three-pass attention). Tests hold them equal; `--kernels` chooses at run time.
// note: the set also decides the attention algorithm (AttentionAlgorithm, at the calls in
// model/llama.cpp's forward_layer_*): no flag picks the algorithm without the rest of the set.
enum class Kernels { fused, unfused };
inline const char* kernels_name(Kernels k) { return k == Kernels::fused ? "fused" : "unfused"; }

class Model {
 public:
  virtual ~Model() = default;
  virtual Backend& backend() = 0;
  virtual const ModelInfo& info() const = 0;
  // Allocates the activations for batches of up to max_rows rows and max_logit_rows logit rows,
  // so that forward() with smaller batches allocates nothing.
  virtual void reserve(int64_t max_rows, int64_t max_logit_rows) = 0;
  // The bytes reserve(max_rows, max_logit_rows) allocates (overflow-checked), to be checked
  // against the device's memory before anything is allocated.
  virtual uint64_t activation_bytes(int64_t max_rows, int64_t max_logit_rows) const = 0;
  // Writes the logits of batch.logit_rows into `logits` (R, vocab) f32 on the model's device.
  virtual void forward(const ForwardBatch& batch, const KvCache& cache, const Tensor& logits) = 0;
  virtual void set_kernels(Kernels kernels) = 0;
  virtual Kernels kernels() const = 0;
  // The graph epoch: changes whenever reserve() moves the activations or set_kernels() changes
  // the work a forward pass enqueues. A recorded forward pass (a CUDA Graph) holds the addresses
  // and kernels of one epoch and is only replayed within it.
  virtual uint64_t graph_epoch() const = 0;
};

}  // namespace minfer
