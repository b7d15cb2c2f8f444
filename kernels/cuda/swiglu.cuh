// SwiGLU, out = silu(gate) * up with silu(g) = g / (1 + e^-g). gate and up may be the two halves
// of one fused W1|W3 product (row-strided views).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace minfer::cuda {

void swiglu(cudaStream_t stream,
            float* out, int64_t ld_out,          // (M, F)
            const float* gate, int64_t ld_gate,  // (M, F)
            const float* up, int64_t ld_up,      // (M, F)
            int64_t M, int64_t F);

}  // namespace minfer::cuda
