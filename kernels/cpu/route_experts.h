#pragma once

#include <cstdint>

#include "core/threads.h"

namespace minfer::cpu {

// A mixture of experts' router (kernels/ref/route_experts.h): the same choice of experts, the
// softmax in float.
void route_experts(ThreadPool& pool,
                   int32_t* ids, float* weights,            // (M, k) each, dense
                   const float* logits, int64_t ld_logits,  // (M, E)
                   int64_t M, int64_t E, int64_t k, bool normalize);

}  // namespace minfer::cpu
