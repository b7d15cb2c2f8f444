#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/threads.h"

namespace minfer::cpu {

// out[m, :] = scale * table[ids[m], :], widened to f32 (see kernels/ref/gather_rows.h). A packed
// table (its rows in the groups of kernels/cpu/quant/packed.h: a shared embedding and classifier)
// gives each row back in the file's layout first (unpack_row).
void gather_rows(ThreadPool& pool,
                 float* out, int64_t ld_out,            // (M, D)
                 const void* table, DType table_dtype,  // (V, D), dense rows
                 bool packed,                           // table's rows packed (pack_rows)
                 const int32_t* ids,                    // (M)
                 int64_t M, int64_t D, int64_t V, float scale);

}  // namespace minfer::cpu
