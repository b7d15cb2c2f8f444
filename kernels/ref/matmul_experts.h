#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace minfer::ref {

// The expert product of a mixture of experts (matmul broadened, as ggml's mul_mat_id): slot j of
// row m multiplies by the matrix of expert ids[m, j],
//   y[m, j, :] = x[r, :] * w[ids[m, j]]^T,   r = m k + j where x_per_slot (one input a slot: the
//                                           down projection), else m (the gate and up projections)
// then out[m k + j, :] = y[m, j, :] without weights, or out[m, :] = sum over j = 0 .. k - 1, in
// that order, of weights[m, j] * y[m, j, :] with them (the layer's weighted sum of its experts).
// Each product is ref::matmul's, row by row: the definition the backends are checked against.
void matmul_experts(float* out, int64_t ld_out,                    // (M k, N), or (M, N) with weights
                    const float* x, int64_t ld_x, bool x_per_slot,  // (M k, K) or (M, K)
                    const void* w, DType w_dtype,                  // (E, N, K), dense
                    const int32_t* ids, const float* weights,      // (M, k) each, dense; weights may be null
                    int64_t M, int64_t k, int64_t E, int64_t N, int64_t K);

}  // namespace minfer::ref
