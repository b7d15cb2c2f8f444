// Row-wise softmax in place: one block per row, block-wide max and sum reductions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace minfer::cuda {

void softmax(cudaStream_t stream,
             float* x, int64_t ld_x,  // (M, N)
             int64_t M, int64_t N);

}  // namespace minfer::cuda
