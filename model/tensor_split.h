// Tensor parallelism: which part of every matrix each of N ranks holds (issue 54).
//
// Megatron-LM's split of a Llama-style layer, which vLLM and TensorRT-LLM also use:
//
//   attention     wq, wk, wv   column-parallel: rank r holds the rows of its heads, so it computes
//                              q, k and v for those heads alone, keeps only their KV cache, and
//                              attends with them, never seeing another rank's heads
//                 wo           row-parallel: rank r holds the columns that read its heads' outputs,
//                              so its product is a partial sum of o      -> all-reduce (sum)
//   feed-forward  w1, w3       column-parallel: rank r holds a run of the hidden units' rows
//                 w2           row-parallel: the columns of those units  -> all-reduce (sum)
//   classifier                 split by vocabulary: rank r's rows give its run of the logits
//
// So two all-reduces a layer cross ranks, each of the residual stream's width, and nothing else
// (and one all-gather of the logits a pass); q, k and v's biases and per-head norms go with their
// heads, and the other norms, RoPE and the routers act on whole rows every rank holds in full.
//
// note: the unit of a split. A row-parallel matrix is cut along its inputs, and a quantized row is
// whole blocks (32 weights, 256 for the K-quants), so a cut must fall on a block: wo's on
// attention_columns, w2's on ffn_columns. The heads go to ranks in whole key/value groups (a KV
// head and the query heads that read it), as many groups a unit as make the unit's wo columns a
// multiple of its block, so no KV head is held twice. Where ranks outnumber KV heads every KV head
// is replicated on ranks / n_kv_heads ranks, which share its query heads. Units are dealt out as
// evenly as they go (18 + 17 for 35), the earlier ranks taking the extra ones; a split that leaves
// a rank no unit of a width the model uses is refused with one line naming that width.
#pragma once

#include <cstdint>
#include <string>

#include "model/llama_config.h"
#include "model/llama_weights.h"

namespace minfer {

// A run [begin, end) of a dimension.
struct IndexRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const IndexRange& o) const { return begin == o.begin && end == o.end; }
};

// The elements a cut along a row-parallel matrix's inputs must fall on: the block size of its
// type (core/dtype.h's dtype_block; 1 for f32, f16, bf16), the largest over the layers where the
// matrices of one role differ in type (a K-quant mix).
struct SplitGrain {
  int64_t attention_columns = 1;  // wo's
  int64_t ffn_columns = 1;        // w2's, of the dense feed-forwards and the shared expert
  int64_t expert_columns = 1;     // each expert's w2
};

struct TensorSplit {
  static constexpr int kMaxRanks = 1024;

  int rank = 0, ranks = 1;
  IndexRange q_heads;        // of n_heads: wq's rows and wo's columns, head_dim each
  IndexRange kv_heads;       // of n_kv_heads: wk's and wv's rows, the KV cache's heads
  IndexRange ffn;            // of hidden_dim: the dense feed-forward's w1, w3 rows and w2 columns
                             // (empty where every layer is a layer of experts)
  IndexRange shared_ffn;     // of shared_expert_hidden_dim (Qwen2-MoE's shared expert)
  IndexRange expert_hidden;  // of expert_hidden_dim: every expert's w1, w3 rows and w2 columns
  IndexRange vocab;          // of vocab_size: the classifier's rows, this rank's logits

  // The decoder this rank computes: its heads (head_size kept), its hidden widths; the vocabulary,
  // context, norms and everything else as in `full`.
  LlamaConfig shard_config(const LlamaConfig& full) const;
  // "rank 1 of 2: heads 7-9 of 9, KV heads 3-3 of 3, ..." (1-based, inclusive): the model line of
  // a split run (cli/cli_common.cpp).
  std::string describe(const LlamaConfig& full) const;
};

// Rank `rank`'s part of a model of `config` over `ranks` ranks (1 .. kMaxRanks; config validated).
// Throws Error("tensor parallel over N ranks: <what>") when a split leaves a rank nothing, or ranks
// outnumber KV heads without being a multiple of them.
TensorSplit split_for_rank(const LlamaConfig& config, const SplitGrain& grain, int rank, int ranks);

// Rank split.rank's part of `full` (validated) as LlamaModel uploads it: split.shard_config with
// a classifier of its own (its vocabulary rows; the embedding table's where the model ties them);
// views of the rows it holds (wq, wk, wv and their biases by heads, w1 and w3 by hidden units, the
// classifier by vocabulary) and copies of the columns (wo, w2), their file pages released once
// copied and the copies' own pages by `release` once uploaded; the norms, routers and embedding
// table whole. Error for OLMoE, whose q and k norms span
// every head (not split yet).
// note: the classifier's rows: config.vocab_size stays the whole vocabulary (the embedding table's
// rows, the logits' width), so the shard's classifier is (split.vocab.size(), dim) and
// LlamaHostWeights::validate, which wants (vocab_size, dim), is for the whole model only.
LlamaHostWeights shard_host_weights(const LlamaHostWeights& full, const TensorSplit& split);

}  // namespace minfer
