// A mixture of experts' router (kernels/ref/route_experts.h), a thread a row: the top k by
// selection, the softmax in float. Graph-safe: its ids stay on the device for matmul_experts.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace minfer::cuda {

void route_experts(cudaStream_t stream,
                   int32_t* ids, float* weights,            // (M, k) each, dense
                   const float* logits, int64_t ld_logits,  // (M, E)
                   int64_t M, int64_t E, int64_t k, bool normalize);

}  // namespace minfer::cuda
