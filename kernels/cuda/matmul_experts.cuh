// The expert product (kernels/ref/matmul_experts.h): matvec_experts (matvec.cuh) computes each
// slot's row, and with weights a second kernel sums a row's slots, in slot order, by weight.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace minfer::cuda {

void matmul_experts(cudaStream_t stream,
                    float* out, int64_t ld_out,                    // (M k, N), or (M, N) with weights
                    const float* x, int64_t ld_x, bool x_per_slot,  // (M k, K) or (M, K)
                    const void* w, DType w_dtype,                  // (E, N, K), dense
                    const int32_t* ids, const float* weights,      // (M, k) each, dense; weights may be null
                    float* slot_rows,                              // (M k, N): scratch, with weights only
                    int64_t M, int64_t k, int64_t E, int64_t N, int64_t K);

}  // namespace minfer::cuda
