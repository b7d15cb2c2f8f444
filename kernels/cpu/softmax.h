#pragma once

#include <cstdint>

#include "core/threads.h"

namespace minfer::cpu {

// Row-wise softmax in place (see kernels/ref/softmax.h).
void softmax(ThreadPool& pool,
             float* x, int64_t ld_x,  // (M, N)
             int64_t M, int64_t N);

}  // namespace minfer::cpu
