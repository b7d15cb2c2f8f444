// The naive matrix product, for study: one thread per output, out[m, n] = sum_k x[m, k] w[n, k],
// every operand read straight from global memory. Each weight is fetched M times and each
// activation N times (the caches catch some of it): the baseline the tiled and Tensor Core
// kernels are measured against (`--gemm naive`, `minfer demo tensor-cores`).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace minfer::cuda {

void gemm_naive(cudaStream_t stream,
                float* out, int64_t ld_out,    // (M, N)
                const float* x, int64_t ld_x,  // (M, K)
                const void* w, DType w_dtype,  // (N, K), dense
                int64_t M, int64_t N, int64_t K);

}  // namespace minfer::cuda
