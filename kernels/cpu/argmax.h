#pragma once

#include <cstdint>

#include "core/threads.h"

namespace minfer::cpu {

// out[m] = first index of the largest x[m, :] (see kernels/ref/argmax.h).
void argmax(ThreadPool& pool,
            int32_t* out,                  // (M)
            const float* x, int64_t ld_x,  // (M, N)
            int64_t M, int64_t N);

}  // namespace minfer::cpu
