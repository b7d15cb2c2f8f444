#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace minfer::ref {

// out[m, :] = scale * table[ids[m], :], widened to f32 and then scaled in f32. Two uses: the token
// embedding lookup (table: the embedding matrix, ids: tokens; scale: 1, or sqrt(dim) for Gemma) and
// picking the rows that need logits out of the activations (table: x, ids: the last row of each
// sequence; scale 1). Throws Error for an id outside [0, V).
void gather_rows(float* out, int64_t ld_out,            // (M, D)
                 const void* table, DType table_dtype,  // (V, D), dense rows
                 const int32_t* ids,                    // (M)
                 int64_t M, int64_t D, int64_t V, float scale);

}  // namespace minfer::ref
