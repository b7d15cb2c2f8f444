#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace minfer::ref {

// out[m, :] = table[ids[m], :]. Also gathers rows of activations (e.g. the last row of each
// sequence before the classifier). Throws Error for an id outside [0, V).
void embedding(float* out, int64_t ld_out,            // (M, D)
               const void* table, DType table_dtype,  // (V, D), dense rows
               const int32_t* ids,                    // (M)
               int64_t M, int64_t D, int64_t V);

}  // namespace minfer::ref
