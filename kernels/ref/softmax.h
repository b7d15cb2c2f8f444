#pragma once

#include <cstdint>

namespace minfer::ref {

// Row-wise softmax in place: x[m, i] = exp(x[m, i] - max) / sum_j exp(x[m, j] - max)
void softmax(float* x, int64_t ld_x,  // (M, N)
             int64_t M, int64_t N);

}  // namespace minfer::ref
