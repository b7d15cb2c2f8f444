#pragma once

#include <cstdint>

namespace minfer {

// The activation of a gated feed-forward layer's gate (a model's declared difference):
//   silu       silu(g) = g / (1 + e^-g): SwiGLU (Llama, Qwen, Phi-3, Mistral)
//   gelu_tanh  gelu(g) ~= g/2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), the tanh form of GELU:
//              GeGLU (Gemma; Hugging Face's "gelu_pytorch_tanh")
//   sigmoid    1 / (1 + e^-g): a gate of one column, which scales a whole row of up (Qwen2-MoE's
//              shared expert, weighted by sigmoid(x . w_gate))
enum class GluActivation { silu, gelu_tanh, sigmoid };

inline const char* glu_activation_name(GluActivation a) {
  return a == GluActivation::silu ? "silu" : a == GluActivation::gelu_tanh ? "gelu_tanh" : "sigmoid";
}

}  // namespace minfer

namespace minfer::ref {

// out = act(gate) * up, the gated linear unit of the feed-forward layer. gate_step is 1, or 0 for
// a gate of one column whose value multiplies every column of its row.
void glu(float* out, int64_t ld_out,                            // (M, F)
         const float* gate, int64_t ld_gate, int64_t gate_step,  // (M, F), or (M, 1) with gate_step 0
         const float* up, int64_t ld_up,                        // (M, F)
         int64_t M, int64_t F, GluActivation activation);

}  // namespace minfer::ref
