// The gated linear unit, out = act(gate) * up (kernels/ref/glu.h: SwiGLU, GeGLU, or a sigmoid gate
// of one column). gate and up may be the two halves of one fused W1|W3 product (row-strided views).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ref/glu.h"

namespace minfer::cuda {

void glu(cudaStream_t stream,
         float* out, int64_t ld_out,                            // (M, F)
         const float* gate, int64_t ld_gate, int64_t gate_step,  // (M, F), or (M, 1) with gate_step 0
         const float* up, int64_t ld_up,                        // (M, F)
         int64_t M, int64_t F, GluActivation activation);

}  // namespace minfer::cuda
