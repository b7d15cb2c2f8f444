#pragma once

#include <cstdint>

namespace minfer::ref {

// out = a + b (the residual connection; with ld_b = 0, b is one row added to every row, a bias);
// out may alias a or b.
void add(float* out, int64_t ld_out,     // (M, D)
         const float* a, int64_t ld_a,   // (M, D)
         const float* b, int64_t ld_b,   // (M, D), or (D) with ld_b = 0
         int64_t M, int64_t D);

}  // namespace minfer::ref
