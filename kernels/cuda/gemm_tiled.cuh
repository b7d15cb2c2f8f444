// The shared-memory tiled matrix product, for study. A block computes a 64 x 64 tile of out; for
// each 16-wide slice of K it stages the 64 activation rows and 64 weight rows it needs in shared
// memory, once, and every thread then computes a 4 x 4 patch from shared memory and registers.
// Each value loaded from global memory is now used 64 times instead of once: the kernel goes
// from memory-bound to compute-bound on CUDA cores (no Tensor Cores; see gemm_mma).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace minfer::cuda {

void gemm_tiled(cudaStream_t stream,
                float* out, int64_t ld_out,    // (M, N)
                const float* x, int64_t ld_x,  // (M, K)
                const void* w, DType w_dtype,  // (N, K), dense
                int64_t M, int64_t N, int64_t K);

}  // namespace minfer::cuda
