// Residual add, out = a + b, over row-strided (M, D) tensors (b may be one row, ld_b = 0); out may
// alias a or b.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace minfer::cuda {

void add(cudaStream_t stream,
         float* out, int64_t ld_out,    // (M, D)
         const float* a, int64_t ld_a,  // (M, D)
         const float* b, int64_t ld_b,  // (M, D), or (D) with ld_b = 0 (a row added to every row)
         int64_t M, int64_t D);

}  // namespace minfer::cuda
