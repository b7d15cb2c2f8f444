#pragma once

#include <cstdint>

#include "core/threads.h"

namespace minfer::cpu {

// out[0] = sum of x (see kernels/ref/sum.h). Each thread streams contiguous blocks with several
// independent vector accumulators; block partial sums are added in block order, so the result
// does not depend on the thread count's scheduling.
void sum(ThreadPool& pool,
         float* out,      // (1)
         const float* x,  // (n)
         int64_t n);

}  // namespace minfer::cpu
