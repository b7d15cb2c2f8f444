// Activations from f32 to f16 or bf16, the input format of the Tensor Core products.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace minfer::cuda {

void cast_rows(cudaStream_t stream,
               void* out, DType out_dtype,    // (M, K), dense
               const float* x, int64_t ld_x,  // (M, K)
               int64_t M, int64_t K);

}  // namespace minfer::cuda
