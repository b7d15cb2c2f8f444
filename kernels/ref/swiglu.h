#pragma once

#include <cstdint>

namespace minfer::ref {

// out = silu(gate) * up, with silu(g) = g / (1 + exp(-g))   (the SwiGLU of Llama's FFN)
void swiglu(float* out, int64_t ld_out,        // (M, F)
            const float* gate, int64_t ld_gate,  // (M, F)
            const float* up, int64_t ld_up,      // (M, F)
            int64_t M, int64_t F);

}  // namespace minfer::ref
