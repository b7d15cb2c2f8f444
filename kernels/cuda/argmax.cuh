// Row-wise argmax: out[m] is the first index of the largest value of row m. One block per row;
// each thread keeps its (value, index) best and the block reduces pairs, preferring the larger
// value and, between equal values, the smaller index, which makes the parallel result the
// sequential one (run.c's sample_argmax). NaN never wins (a row of NaN gives 0).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace minfer::cuda {

void argmax(cudaStream_t stream,
            int32_t* out,                  // (M)
            const float* x, int64_t ld_x,  // (M, N)
            int64_t M, int64_t N);

}  // namespace minfer::cuda
