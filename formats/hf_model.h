// Hugging Face checkpoints of LlamaForCausalLM and the families that differ from it by a declared
// feature (hf_model.cpp's table: Mistral, Qwen2, Qwen3, Phi-3, Gemma 3, and the mixtures of experts
// Qwen3-MoE, OLMoE, Mixtral, Qwen2-MoE): a folder with config.json, the weights as
// model.safetensors or shards listed in model.safetensors.index.json, and optionally
// generation_config.json (whose bos/eos ids win over config.json's), tokenizer.json and
// tokenizer_config.json. `-m` takes the folder, or a .safetensors file inside it.
//
// Read from config.json: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads (MHA, GQA, MQA), head_dim when it differs from hidden / heads,
// rms_norm_eps, rope_theta and rope_scaling (types llama3 and linear), or transformers 5's
// rope_parameters (per layer type for Gemma 3, or its rope_local_base_freq), hidden_act or
// hidden_activation (silu, gelu_pytorch_tanh), query_pre_attn_scalar, sliding_window with
// layer_types, sliding_window_pattern or Qwen's use_sliding_window and max_window_layers,
// tie_word_embeddings (absent: tied for Gemma, as transformers defaults it), max_position_embeddings,
// bos_token_id, eos_token_id (an int or a list); for a mixture of experts num_experts or
// num_local_experts, num_experts_per_tok, moe_intermediate_size (Qwen) or intermediate_size,
// norm_topk_prob, decoder_sparse_step, mlp_only_layers, shared_expert_intermediate_size
// (hf_model.cpp's read_experts). Anything else that changes the computation (another
// architecture, an unknown rope scaling, partial rotary embeddings, biases other than Qwen2's and
// Qwen2-MoE's on q, k and v, another activation, soft-capping, OLMoE's clip_qkv, a Qwen MoE's
// sliding window) is refused with one line naming it.
// q_proj and k_proj are stored for rotate-half RoPE: the weights carry rotate_half, and LlamaModel
// reorders their rows at upload (model/llama_weights.h); Gemma's norms are stored as w for
// x (1 + w), and the weights carry norm_weight_offset 1.
#pragma once

#include <string>

#include "model/llama_weights.h"

namespace minfer {

// The config of a model folder (config.json, then generation_config.json for the token ids).
LlamaConfig read_hf_config(const std::string& folder);
// Parses one config.json text; `source` names it in errors.
LlamaConfig parse_hf_config(const std::string& json_text, const std::string& source);

// Maps the weights of the folder (or of the folder of a .safetensors file) and returns views.
LlamaHostWeights load_hf_weights(const std::string& path);

// The folder of an -m argument that names a folder or a .safetensors file in one.
std::string hf_model_folder(const std::string& path);

}  // namespace minfer
