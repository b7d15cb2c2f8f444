// A Llama-style decoder written once against the backend interface: the same forward pass runs
// on the reference, CPU and CUDA backends. See model/llama.cpp for the walk through one layer.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/communicator.h"
#include "engine/model.h"
#include "model/llama_config.h"
#include "model/llama_weights.h"
#include "model/presets.h"
#include "model/tensor_split.h"

namespace minfer {

// A weight matrix as consecutive blocks of rows, each one tensor of one type: one part for a
// model of one type, several where a file mixes types within what minfer multiplies at once.
struct RowBlocks {
  std::vector<Tensor> parts;  // (rows_i, in) each
  int64_t rows() const;
  // Rows [begin, end): the parts that hold them, cut where needed.
  RowBlocks slice(int64_t begin, int64_t end) const;
  // The one part (Error for a matrix in several).
  const Tensor& tensor() const;
};
// out = x * w[begin:end]^T, part by part: each part writes its rows' columns of out (nothing is
// allocated: this runs in the decode loop).   out (M, end - begin); x (M, K); w (N, K)
void matmul(Backend& backend, const Tensor& out, const Tensor& x, const RowBlocks& w, int64_t begin = 0,
            int64_t end = -1);

struct LlamaOptions {
  // Of the weight matrices and the embedding table (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0 or
  // q5_1; presets also the K-quants and the q4_k_m and q5_k_m mixes, model/llama_config.h);
  // unset: each as the file stores it (f32 for llama2.c files and presets; a GGUF file may mix
  // types, e.g. Q4_K_M stores some matrices in Q6_K).
  std::optional<WeightTypes> dtype;
  Kernels kernels = Kernels::fused;  // (engine/model.h)
  uint64_t seed = kDefaultModelSeed;  // of synthetic (preset) weights
  // Presets only: their context length instead of the shape's own (stories15M was trained with
  // 256 positions; a serving benchmark of prompts and outputs up to 256 each needs 512). A
  // model file's context is what it was trained with and is never extended.
  int64_t preset_ctx = 0;
  // Tensor parallel over its ranks (model/tensor_split.h): this process holds and computes its
  // rank's part of a model file's weights (at one rank, all of them, through the same path), and
  // every rank must run the same forward passes. On a CUDA backend a host communicator (MPI's)
  // sets up NCCL between the ranks' GPUs, which runs the passes' collectives. Null: the whole
  // model, no collectives.
  Communicator* communicator = nullptr;
};

class LlamaModel final : public Model {
 public:
  // Weights from the host (a file's views), converted to options.dtype and copied to the
  // backend tensor by tensor, each released as soon as it is copied.
  LlamaModel(Backend& backend, const LlamaHostWeights& weights, const std::string& name,
             const LlamaOptions& options);
  // Synthetic weights generated on the backend (see model/presets.h).
  LlamaModel(Backend& backend, const LlamaConfig& config, const std::string& name,
             const LlamaOptions& options);

  Backend& backend() override { return backend_; }
  const ModelInfo& info() const override { return info_; }
  const LlamaConfig& config() const { return config_; }
  void reserve(int64_t max_rows, int64_t max_logit_rows) override;
  uint64_t activation_bytes(int64_t max_rows, int64_t max_logit_rows) const override;
  void forward(const ForwardBatch& batch, const KvCache& cache, const Tensor& logits) override;
  void set_kernels(Kernels kernels) override {
    if (kernels != kernels_) ++graph_epoch_;
    kernels_ = kernels;
  }
  Kernels kernels() const override { return kernels_; }
  uint64_t graph_epoch() const override { return graph_epoch_; }
  // How many of the matrices multiplied (the classifier, each part of each layer's, each expert
  // matrix's experts as one, and the f32 routers, which are never packed) the backend
  // holds in a layout of its own (Backend::pack_weights), e.g. "29 of 31 matrices packed16"; empty
  // when none.
  std::string weight_layout() const;
  // Whether every matrix multiplied is packed, so that each row's logits are the same whatever
  // shares its pass (kernels/cpu/quant/packed.h).
  bool all_matrices_packed() const { return matrices_ > 0 && packed_ == matrices_; }

  // A mixture of experts: while counting, each forward pass adds its rows, the bytes of the experts
  // its rows chose (each layer's distinct experts, which the CPU's expert product reads once a pass),
  // how many (layer, expert) pairs those were, and how many a uniform router's would be expected to
  // be (LlamaConfig::expected_experts_read of the pass's rows, in each layer of experts). Host backends only (ref, cpu): a device's ids would need
  // a copy and a wait, and a recorded step replays without this code; Error elsewhere.
  struct ExpertReads {
    uint64_t passes = 0, rows = 0, experts = 0, bytes = 0;
    double predicted_experts = 0.0;
  };
  void count_expert_reads(bool on);  // and starts the counts from zero
  const ExpertReads& expert_reads() const { return expert_reads_; }

  // Bytes of weights the model stores on the device for (config, dtype), and for host weights
  // stored as `dtype` asks (unset: as they are).
  static uint64_t weight_bytes(const LlamaConfig& config, const WeightTypes& dtype);
  static uint64_t weight_bytes(const LlamaHostWeights& weights, const std::optional<WeightTypes>& dtype);
  // The blocks a tensor-parallel cut of each row-parallel matrix must fall on: those of the file's
  // type, where the columns are cut, and of the type `dtype` asks to store it in (unset: the file's).
  static SplitGrain split_grain(const LlamaHostWeights& weights, const std::optional<WeightTypes>& dtype);
  // This rank's part, where the model is split over ranks (nullptr otherwise).
  const TensorSplit* split() const { return comm_ != nullptr ? &split_ : nullptr; }
  // The communicator its passes' collectives run on, where split (NCCL's on a GPU): nullptr otherwise.
  Communicator* ranks() const { return comm_; }
  // The whole model's shape: config() where the model is not split, else what its parts make up.
  const LlamaConfig& full_config() const { return comm_ != nullptr ? full_config_ : config_; }

 private:
  // Fails on a rank whose file's header_digest (LlamaHostWeights) is not rank 0's: the first
  // collective of a split, before the ranks' shapes could part.
  void check_same_file(Communicator& comm, uint64_t header_digest);
  void split_over(Communicator& comm, const SplitGrain& grain);  // sets comm_, split_ and the counts
  void upload_weights(const std::string& name, const LlamaHostWeights& weights);  // allocates, copies, packs
  void allocate(const std::string& name, const LlamaHostWeights* host);
  void allocate_tables(const LlamaHostWeights* host);  // the embedding table and the classifier
  void describe_types();  // info_.dtype and info_.weight_types
  void pack_weights();    // hands the classifier and the layers' matrices to Backend::pack_weights
  // Calls fn(tensor) for the embedding table, the classifier when it is a matrix of its own, and
  // every part of every layer's matrices (the experts' too, and with `routers` the routers, which
  // stay f32 as the norms do): every weight tensor but the norms and the RoPE table.
  template <class Fn>
  void for_each_matrix(Fn&& fn, bool routers = true) const {
    fn(w_.token_embedding);
    if (!config_.shared_classifier) fn(w_.classifier);
    for (const Layer& layer : w_.layers) {
      for (const RowBlocks* r : {&layer.wqkv, &layer.wo, &layer.w13, &layer.w2})
        for (const Tensor& t : r->parts) fn(t);
      for (const Tensor* t : {&layer.w1_experts, &layer.w3_experts, &layer.w2_experts})
        if (t->defined()) fn(*t);
      if (routers && layer.router.defined()) fn(layer.router);
    }
  }
  struct LayerViews;
  LayerViews layer_views(int64_t layer, int64_t M, const KvCache& cache) const;
  void forward_layer_unfused(const LayerViews& views, const ForwardBatch& batch);
  void forward_layer_fused(int64_t layer, const LayerViews& views, const ForwardBatch& batch);
  // proj = the feed-forward of xb in a layer of experts (both kernel sets: its ops have no fused form).
  void feed_forward_experts(const LayerViews& views);
  void tally_expert_reads(const LayerViews& views);  // count_expert_reads' counting
  // Tensor parallel: x = the sum of every rank's x (the row-parallel products' partial sums); a
  // no-op in one process.
  void sum_over_ranks(const Tensor& x);
  // Tensor parallel: logits (R, vocab) = every rank's part of them, from this rank's classifier rows.
  void gather_logits(const Tensor& logits, const Tensor& last_norm);

  Backend& backend_;
  LlamaConfig config_;
  std::optional<WeightTypes> dtype_;  // the types asked for; unset: each weight's own
  Kernels kernels_;
  uint64_t graph_epoch_ = 0;
  ModelInfo info_;
  int64_t matrices_ = 0, packed_ = 0;  // of pack_weights
  bool counting_experts_ = false;
  ExpertReads expert_reads_;
  std::vector<uint8_t> expert_seen_;  // (n_experts): chosen by a row of this pass's layer
  // Tensor parallel (split_over): the ranks, this rank's part, the whole model's shape, every
  // rank's count of vocabulary rows, and all_gather's counts for a pass's logits (kept so a pass
  // allocates nothing).
  Communicator* comm_ = nullptr;
  std::unique_ptr<Communicator> nccl_;  // comm_ on a GPU (set up through the host communicator given)
  TensorSplit split_;
  LlamaConfig full_config_;
  // A split model on a host backend reads its embedding table in place, from the host weights'
  // memory (a file's mapping), which it keeps alive (allocate's note).
  bool mapped_embedding_ = false;
  std::shared_ptr<void> mapping_;
  std::vector<int64_t> vocab_counts_, gather_counts_;
  // note: Q, K and V weights are stored as one (q_dim + 2 kv_dim, dim) matrix per layer, and W1
  // and W3 as one (2 hidden, dim) matrix: the fused path multiplies each in one product, the
  // unfused path multiplies its row blocks separately; the memory is the same. Where a file
  // stores them in different types (Q4_K_M: V in Q6_K, Q and K in Q4_K), the matrix is kept in
  // parts of one type each and the fused product is one product per part.
  // A layer of experts keeps each expert matrix's experts in one (n_experts, rows, in) tensor, the
  // layout Backend::matmul_experts multiplies; its w13 and w2 are the shared expert's (empty
  // without one), and the shared expert's gate is a last row of the router, so one product gives
  // both.
  struct Layer {
    RowBlocks wqkv;          // (q_dim + 2 kv_dim, dim)
    RowBlocks wo;            // (dim, q_dim)
    RowBlocks w13;           // (2 hidden, dim); hidden: config.ffn_hidden(layer)
    RowBlocks w2;            // (dim, hidden)
    Tensor router;           // (n_experts [+ 1], dim) f32: the experts' rows, then the shared expert's gate
    Tensor w1_experts, w3_experts;  // (n_experts, expert_hidden, dim) each
    Tensor w2_experts;       // (n_experts, dim, expert_hidden)
  };
  struct Weights {
    Tensor token_embedding;  // (vocab, dim)
    Tensor classifier;       // (vocab, dim), the embedding when shared
    Tensor rms_att;          // (L, dim) f32
    Tensor rms_ffn;          // (L, dim) f32
    Tensor rms_final;        // (dim) f32
    Tensor bqkv;             // (L, q_dim + 2 kv_dim) f32: q | k | v biases, with qkv_bias only
    Tensor q_norm, k_norm;   // (L, q_norm_dim), (L, k_norm_dim) f32: with qk_norm only
    Tensor rms_post_att, rms_post_ffn;  // (L, dim) f32 each: with post_norms only
    std::vector<Layer> layers;
    Tensor rope;             // (n_ctx, head_dim) f32: (cos, sin) pairs per position
    Tensor rope_sliding;     // (n_ctx, head_dim) f32: the sliding layers' own, with rope_theta_sliding only
  } w_;
  // Activations for up to `rows` rows.
  struct Workspace {
    int64_t rows = 0, logit_rows = 0;
    Tensor x;     // (rows, dim): the residual stream
    Tensor xb;    // (rows, dim): normalised input of a block
    Tensor qkv;   // (rows, q_dim + 2 kv_dim): q | k | v
    Tensor att;   // (rows, q_dim): attention output
    Tensor proj;  // (rows, dim): output of wo and w2, added to the residual stream
    Tensor h13;   // (rows, 2 hidden): w1 x | w3 x
    Tensor hb;    // (rows, hidden): act(w1 x) * w3 x
    Tensor last;  // (logit_rows, dim): the rows whose logits are wanted
    Tensor last_norm;  // (logit_rows, dim)
    // With experts (0 columns without): k = n_experts_used slots a row, f = expert_hidden_dim.
    Tensor router;     // (rows, n_experts [+ 1]): the router's logits (and the shared expert's gate)
    Tensor expert_weights;  // (rows, k)
    Tensor h13_slots;  // (rows, 2 k f): each slot's w1 x | w3 x, as (rows k, 2 f)
    Tensor hb_slots;   // (rows, k f): each slot's act(w1 x) * w3 x, as (rows k, f)
    Tensor shared;     // (rows, dim): the shared expert's output
    Tensor expert_ids;  // (rows, k) i32
    // Tensor parallel (0 columns in one process): this rank's logits, and every rank's, gathered
    // in rank order, (logit_rows, vocab) as a flat buffer.
    Tensor logits_part;      // (logit_rows, this rank's vocabulary rows)
    Tensor logits_gathered;  // (logit_rows, vocab)
  } ws_;
  // The workspace's buffers as one list, which reserve() allocates and activation_bytes() counts:
  // each is (rows, columns), or (logit_rows, columns) where per_logit_row; f32 but the expert ids.
  struct WorkspaceBuffer {
    Tensor Workspace::*member;
    bool per_logit_row;
    int64_t columns;
    DType dtype = DType::f32;
  };
  std::array<WorkspaceBuffer, 17> workspace_buffers() const;
};

}  // namespace minfer
