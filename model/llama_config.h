// The shape of a Llama-style decoder and the constants of its layers, as a llama2.c header, a
// Hugging Face config.json or GGUF metadata describe it, with the checks every description must
// pass before a byte is allocated and the sizes derived from it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/ref/attention.h"
#include "kernels/ref/glu.h"
#include "kernels/ref/route_experts.h"

namespace minfer {

// How positions are scaled before RoPE (Hugging Face's rope_scaling / rope_parameters):
//   none     angle = position * inv_freq[j],  inv_freq[j] = 1 / theta^(2j / head_dim)
//   linear   every inv_freq divided by `factor` (positions stretched)
//   llama3   Llama 3.1's rule: low frequencies divided by `factor`, high ones kept, a smooth
//            blend between (original_max_positions, low_freq_factor, high_freq_factor)
//   factors  inv_freq[j] divided by factors[j], given per frequency (GGUF's rope_freqs tensor,
//            which is how llama.cpp's converter stores llama3 scaling)
struct RopeScaling {
  enum class Type { none, linear, llama3, factors } type = Type::none;
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_positions = 8192;
  std::vector<float> factors;  // (head_dim / 2), Type::factors only
};

// The dtype a matrix whose rows hold `in_features` weights is stored in when `wanted` is asked for:
// quantized types need rows of whole blocks, and a matrix whose rows are not falls back as
// llama.cpp's quantizer falls back: q4_k, q5_k and q6_k to q5_0, q5_1 and q8_0 (rows of 32, as
// SmolLM2's 576-wide matrices in its Q4_K_M file), any other type, or rows not of 32, to f16
// (stories260K's w2, 172 wide). Other dtypes are kept.
DType matrix_dtype(DType wanted, int64_t in_features);

// What a weight is: a matrix of a layer, the token embedding table, or the classifier (which is
// the embedding table too where the model ties them). A mixture of experts' matrices take the roles
// of the dense ones they replace (w1, w3, w2); its router and a shared expert's gate are `router`,
// kept in f32 as llama-quantize keeps them.
enum class WeightRole { wq, wk, wv, wo, w1, w3, w2, embedding, classifier, router };

// The types of a model's matrices and tables when a type is asked for: one type for all (f32,
// q8_0, q4_k, ...), or one of llama-quantize's K-quant mixes, q4_k_m and q5_k_m, as its
// llama_tensor_get_type picks them for a Llama model: the classifier and, in the layers
// use_more_bits picks (the first and last eighth and every third between), wv and w2 in Q6_K;
// every other matrix and the embedding table in the base type (Q4_K, Q5_K). stories110M: 13 of
// its 85 matrices and tables in Q6_K, as in llama-quantize's file. Any matrix whose rows are not
// whole blocks then falls back (matrix_dtype).
class WeightTypes {
 public:
  DType base = DType::f32;

  WeightTypes() = default;
  WeightTypes(DType type) : base(type) {}  // one type for all (implicit, as a DType was before)
  // The _M mix above of `mix_base`, q4_k or q5_k (Error for any other).
  static WeightTypes k_mix_of(DType mix_base);
  // A dtype's name, or "q4_k_m" / "q5_k_m"; nullopt for anything else.
  static std::optional<WeightTypes> parse(const std::string& name);
  bool is_k_mix() const { return k_mix_; }
  std::string name() const;
  // The type of weight `role` of layer `layer` (of n_layers; 0 for the tables) with rows of
  // `in_features` weights.
  DType of(WeightRole role, int64_t layer, int64_t n_layers, int64_t in_features) const;
  bool operator==(const WeightTypes& other) const { return base == other.base && k_mix_ == other.k_mix_; }
  bool operator!=(const WeightTypes& other) const { return !(*this == other); }

 private:
  bool k_mix_ = false;
};

// note: a family is a declared difference. Every field below whose comment names families is one
// feature a loader sets from the file; its default is Llama's, and the forward pass
// (model/llama.cpp) and the one page (model/naive_llama.cpp) apply it where it is set.
struct LlamaConfig {
  int64_t dim = 0;          // width of the residual stream
  int64_t hidden_dim = 0;   // width of the gated feed-forward layer
  int64_t n_layers = 0;
  int64_t n_heads = 0;      // query heads
  int64_t n_kv_heads = 0;   // key/value heads (grouped-query attention when < n_heads)
  int64_t vocab_size = 0;
  int64_t n_ctx = 0;        // the model's context: the longest it supports (llama2.c: seq_len), the rope table's rows
  int64_t head_size = 0;    // the width of a head when it is not dim / n_heads (0: dim / n_heads)
  bool shared_classifier = true;  // the output classifier is the token embedding table
  bool qkv_bias = false;    // q, k and v each add a bias after their product (Qwen2)
  bool qk_norm = false;     // every head of q and k gets an RMSNorm before RoPE (Qwen3, Qwen3-MoE,
                            // Gemma 3; OLMoE the whole of q and of k: qk_norm_whole)
  // An RMSNorm of attention's output and of the feed-forward's output, each before its residual
  // add (Gemma 3's post_attention_layernorm and post_feedforward_layernorm).
  bool post_norms = false;
  GluActivation activation = GluActivation::silu;  // of the feed-forward's gate: SwiGLU; GeGLU (Gemma)
  // Token embeddings are multiplied by it (Gemma: sqrt(dim), in f32, or rounded to a 16-bit
  // Hugging Face table's type as transformers rounds it).
  float embedding_scale = 1.0f;
  float attention_scale = 0.0f;  // of q . k; 0: 1 / sqrt(head_dim) (Gemma: query_pre_attn_scalar^-1/2)
  // Sliding-window attention: a sliding layer's row at position p sees keys p - W < t <= p, W =
  // sliding_window (Mistral v0.1 and Phi-3 mini: every layer; Gemma 3: 5 layers in 6, the 6th
  // global). 0: every layer attends to every key up to its own.
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;  // (n_layers): which layers slide; empty: all, with a window
  // The RoPE base of the sliding layers where it differs from rope_theta (Gemma 3's local layers:
  // 10000 against 1e6), unscaled; 0: the sliding layers rotate as the others do.
  double rope_theta_sliding = 0.0;
  // OLMoE: the q and k norms normalise each row's whole projection (weights q_dim and kv_dim wide),
  // not each head (head_dim wide).
  bool qk_norm_whole = false;
  // A mixture of experts in place of the dense feed-forward (Qwen3-MoE, OLMoE, Mixtral, Qwen2-MoE):
  // a router (n_experts, dim) scores the experts for each token, the n_experts_used best take it,
  // each a gated feed-forward of expert_hidden_dim, and their outputs are summed by the router's
  // softmax weights, renormalised over the chosen where normalize_expert_weights (Qwen3-MoE's
  // norm_topk_prob; Mixtral's softmax over its top k is the same). 0 experts: a dense model.
  int64_t n_experts = 0;
  int64_t n_experts_used = 0;
  int64_t expert_hidden_dim = 0;
  bool normalize_expert_weights = false;
  // Qwen2-MoE: a shared expert, a gated feed-forward of this width that every token takes, scaled
  // by sigmoid(x . w_gate) (a (1, dim) gate) and added to the experts' sum. 0: none.
  int64_t shared_expert_hidden_dim = 0;
  // (n_layers): the layers of a mixture of experts whose feed-forward stays dense, hidden_dim wide
  // (Qwen3-MoE's and Qwen2-MoE's mlp_only_layers and decoder_sparse_step); empty: none.
  std::vector<bool> dense_ffn_layers;
  float rms_eps = 1e-5f;    // RMSNorm's epsilon (llama2.c's 1e-5; config.json's rms_norm_eps)
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  // Token ids: BOS, and the ids that end a generation (llama2.c: BOS 1; BOS and EOS, 1 and 2,
  // stop, as in run.c; a Hugging Face model stops at its eos_token_id(s)).
  int32_t bos_id = 1;
  std::vector<int32_t> stop_ids = {1, 2};

  int64_t head_dim() const { return head_size > 0 ? head_size : dim / n_heads; }
  bool layer_slides(int64_t layer) const {
    return sliding_window > 0 && (sliding_layers.empty() || sliding_layers[static_cast<size_t>(layer)]);
  }
  // Layer `layer`'s attention: its head width, score scale and window.
  AttentionSpec attention_spec(int64_t layer) const {
    return {head_dim(), attention_scale, layer_slides(layer) ? sliding_window : 0};
  }
  // Whether `layer` rotates by the sliding layers' own RoPE table (rope_theta_sliding).
  bool layer_uses_sliding_rope(int64_t layer) const { return rope_theta_sliding > 0.0 && layer_slides(layer); }
  bool layer_has_experts(int64_t layer) const {
    return n_experts > 0 && (dense_ffn_layers.empty() || !dense_ffn_layers[static_cast<size_t>(layer)]);
  }
  // The width of layer `layer`'s dense gated feed-forward (w1, w3, w2): hidden_dim, or in a layer of
  // experts the shared expert's (0: none).
  int64_t ffn_hidden(int64_t layer) const { return layer_has_experts(layer) ? shared_expert_hidden_dim : hidden_dim; }
  // The experts a layer of experts reads in a step of `rows` rows, predicted for a router that
  // picks each row's k of E uniformly and independently: E (1 - (1 - k/E)^rows); k for one row,
  // approaching E as rows grow.
  double expected_experts_read(int64_t rows) const;
  // The router's rows: the experts', and the shared expert's gate where there is one.
  int64_t router_rows() const { return n_experts + (shared_expert_hidden_dim > 0 ? 1 : 0); }
  int64_t q_norm_dim() const { return qk_norm_whole ? q_dim() : head_dim(); }  // the q norm's weights
  int64_t k_norm_dim() const { return qk_norm_whole ? kv_dim() : head_dim(); }  // the k norm's weights
  int64_t q_dim() const { return n_heads * head_dim(); }     // width of q and of attention's output
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }

  // Limits a header must respect: large enough for any model minfer targets, small enough that
  // every size below fits comfortably in 64 bits.
  static constexpr int64_t kMaxDim = 1 << 16;
  static constexpr int64_t kMaxHiddenDim = 1 << 18;
  static constexpr int64_t kMaxLayers = 1 << 10;
  static constexpr int64_t kMaxHeads = 1 << 10;
  static constexpr int64_t kMaxVocab = 1 << 22;
  static constexpr int64_t kMaxCtx = 1 << 20;
  static constexpr int64_t kMaxExperts = ref::kMaxExperts;  // route_experts' limit

  // Throws Error("<source>: <field> = <value>, <the rule it breaks>") for the first bad field.
  void validate(const std::string& source) const;
  void validate_experts(const std::string& source) const;  // the mixture of experts' fields (validate calls it)

  // Parameters of every weight, counted with overflow checks (call validate() first).
  uint64_t n_params() const;            // including the classifier if it is not shared
  // The matrices' weights: the layers' (every expert's) and the classifier. A step of one token
  // reads those less the experts it does not choose (n_active_matmul_params).
  uint64_t n_matmul_params() const;
  uint64_t n_active_matmul_params() const;  // with n_experts_used experts a layer of experts
  // A layer's seven matrices in the order wq, wk, wv, wo, w1, w3, w2: role, rows and inputs. The
  // feed-forward's are ffn_hidden(layer) rows or inputs: 0 in a layer of experts without a
  // shared expert.
  struct MatrixShape {
    WeightRole role;
    int64_t rows, in;
  };
  std::array<MatrixShape, 7> layer_matrix_shapes(int64_t layer) const;
  // One expert's three matrices, w1, w3 and w2 (a layer of experts holds n_experts of each), and
  // the router's (n_experts, dim).
  std::array<MatrixShape, 3> expert_matrix_shapes() const;
  // The bytes of the layers' matrices stored as `wanted` asks (matrix_dtype per matrix), experts
  // and routers (f32) included.
  uint64_t layer_matrix_bytes(const WeightTypes& wanted) const;
  std::string describe() const;         // "dim 288, hidden 768, 6 layers, 6/6 heads, vocab 32000, ctx 256"
  // The first declared difference from Llama that the config has, named with its families ("q
  // and k norms (Qwen3, Gemma 3)"), or nullptr for a Llama: what a llama2.c or llama GGUF file
  // could not hold.
  const char* family_feature() const;
  // The RoPE frequencies of a head, theta and the scaling applied, in float as the references
  // compute them (PyTorch in float32, run.c in float): (head_dim / 2). With `sliding`, those of
  // the sliding layers' table: rope_theta_sliding, unscaled.
  std::vector<float> rope_inv_freq(bool sliding = false) const;
};

}  // namespace minfer
