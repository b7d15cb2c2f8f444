#include "kernels/ref/gather_rows.h"

#include "kernels/ref/element.h"

namespace minfer::ref {

void gather_rows(float* out, int64_t ld_out, const void* table, DType table_dtype,
                 const int32_t* ids, int64_t M, int64_t D, int64_t V, float scale) {
  for (int64_t m = 0; m < M; ++m) {
    MINFER_CHECK(ids[m] >= 0 && ids[m] < V, "token id ", ids[m], " outside [0, ", V, ")");
    for (int64_t d = 0; d < D; ++d)
      out[m * ld_out + d] = static_cast<float>(load_element(table, table_dtype, ids[m] * D + d)) * scale;
  }
}

}  // namespace minfer::ref
