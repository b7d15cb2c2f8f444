#pragma once

#include <cstdint>

#include "core/threads.h"

namespace minfer::cpu {

// The backend's own product of expert e's matrix: y (rows, N) = x (rows, K) * w[e]^T.
using ExpertProduct =
    FunctionRef<void(int64_t e, float* y, int64_t ld_y, const float* x, int64_t ld_x, int64_t rows)>;

// The expert product (kernels/ref/matmul_experts.h) with the slots grouped by expert: the inputs
// of every slot that chose expert e are gathered into consecutive rows, and `multiply` multiplies
// them by e's matrix in one product, so each chosen matrix is read once a call, whatever the rows
// that chose it. The results go back to their slots, or are summed into their rows by weight, in
// slot order. A slot's product is the backend's product of its expert's matrix (packed weights
// give a row the same result whatever shares its product, as matmul does). The gathered rows live
// in the calling thread's buffers (M k rows of K and of N floats), which grow when a call has more
// slots than any before it and are reused otherwise: decode steps of one batch allocate nothing.
void matmul_experts(ThreadPool& pool,
                    float* out, int64_t ld_out,                    // (M k, N), or (M, N) with weights
                    const float* x, int64_t ld_x, bool x_per_slot,  // (M k, K) or (M, K)
                    const int32_t* ids, const float* weights,      // (M, k) each, dense; weights may be null
                    int64_t M, int64_t k, int64_t E, int64_t N, int64_t K, ExpertProduct multiply);

}  // namespace minfer::cpu
