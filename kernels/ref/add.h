#pragma once

#include <cstdint>

namespace minfer::ref {

// out = a + b (the residual connection); out may alias a or b.
void add(float* out, int64_t ld_out,     // (M, D)
         const float* a, int64_t ld_a,   // (M, D)
         const float* b, int64_t ld_b,   // (M, D)
         int64_t M, int64_t D);

}  // namespace minfer::ref
