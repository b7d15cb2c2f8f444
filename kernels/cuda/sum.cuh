// The streaming read that measures HBM bandwidth: out[0] = sum of x. A fixed grid of blocks
// reads 16-byte vectors, grid-striding over the buffer so every SM has many loads in flight;
// block sums land in `partials`, which one more block adds up in order (a deterministic result).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace minfer::cuda {

// Floats of scratch `sum` needs for its block partial sums.
int64_t sum_partials_needed();

void sum(cudaStream_t stream,
         float* out,       // (1)
         const float* x,   // (n), 16-byte aligned: read as float4 (op_checks::sum refuses other x)
         int64_t n,
         float* partials);  // (sum_partials_needed())

}  // namespace minfer::cuda
