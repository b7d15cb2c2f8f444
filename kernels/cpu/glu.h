#pragma once

#include <cstdint>

#include "core/threads.h"
#include "kernels/ref/glu.h"

namespace minfer::cpu {

// out = act(gate) * up (see kernels/ref/glu.h). gate and up may be the two halves of one [M, 2F]
// product (W1 and W3 fused), given as row-strided views; gate_step 0: one gate a row.
void glu(ThreadPool& pool,
         float* out, int64_t ld_out,                            // (M, F)
         const float* gate, int64_t ld_gate, int64_t gate_step,  // (M, F), or (M, 1) with gate_step 0
         const float* up, int64_t ld_up,                        // (M, F)
         int64_t M, int64_t F, GluActivation activation);

}  // namespace minfer::cpu
