#pragma once

#include <cstdint>

#include "core/threads.h"

namespace minfer::cpu {

// out = a + b; out may alias a or b (see kernels/ref/add.h).
void add(ThreadPool& pool,
         float* out, int64_t ld_out,    // (M, D)
         const float* a, int64_t ld_a,  // (M, D)
         const float* b, int64_t ld_b,  // (M, D), or (D) with ld_b = 0
         int64_t M, int64_t D);

}  // namespace minfer::cpu
