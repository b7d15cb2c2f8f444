#pragma once

#include <cstdint>

namespace minfer::ref {

// out[0] = x[0] + x[1] + ... + x[n-1]. A pure streaming read: the kernel the roofline uses to
// measure memory bandwidth.
void sum(float* out,       // (1)
         const float* x,   // (n)
         int64_t n);

}  // namespace minfer::ref
