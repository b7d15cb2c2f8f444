#pragma once

#include <cstdint>

#include "core/threads.h"

namespace minfer::cpu {

// out = silu(gate) * up (see kernels/ref/swiglu.h). gate and up may be the two halves of one
// [M, 2F] product (W1 and W3 fused), given as row-strided views.
void swiglu(ThreadPool& pool,
            float* out, int64_t ld_out,          // (M, F)
            const float* gate, int64_t ld_gate,  // (M, F)
            const float* up, int64_t ld_up,      // (M, F)
            int64_t M, int64_t F);

}  // namespace minfer::cpu
