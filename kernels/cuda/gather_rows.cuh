// Row gather, scaled (kernels/ref/gather_rows.h): the token embedding lookup and the logit rows' pick.
// One block per row; consecutive threads read consecutive elements (coalesced), or for quantized
// tables consecutive groups of 8 values.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace minfer::cuda {

void gather_rows(cudaStream_t stream,
                 float* out, int64_t ld_out,            // (M, D)
                 const void* table, DType table_dtype,  // (V, D), dense; quantized: (V, D / block) blocks
                 const int32_t* ids,                    // (M)
                 int64_t M, int64_t D, float scale);

}  // namespace minfer::cuda
