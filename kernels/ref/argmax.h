#pragma once

#include <cstdint>

namespace minfer::ref {

// out[m] = the first index of the largest x[m, :], as run.c's sample_argmax finds it: a later
// equal value does not win, and comparisons with NaN are false.
void argmax(int32_t* out,                // (M)
            const float* x, int64_t ld_x,  // (M, N)
            int64_t M, int64_t N);

}  // namespace minfer::ref
