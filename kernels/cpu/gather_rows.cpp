#include "kernels/cpu/gather_rows.h"

#include <vector>

#include "core/error.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/quant/packed.h"

namespace minfer::cpu {

void gather_rows(ThreadPool& pool, float* out, int64_t ld_out, const void* table, DType table_dtype, bool packed,
                 const int32_t* ids, int64_t M, int64_t D, int64_t V, float scale) {
  for (int64_t m = 0; m < M; ++m)
    MINFER_CHECK(ids[m] >= 0 && ids[m] < V, "token id ", ids[m], " outside [0, ", V, ")");
  const auto* bytes = static_cast<const char*>(table);
  const int64_t row_bytes = static_cast<int64_t>(dtype_bytes(table_dtype, static_cast<uint64_t>(D)));
  for_rows(pool, M, D, [&](int64_t m0, int64_t m1) {
    thread_local std::vector<char> file_row;  // a packed table's row in the file's layout; grows once
    if (packed && file_row.size() < size_t(row_bytes)) file_row.resize(size_t(row_bytes));
    for (int64_t m = m0; m < m1; ++m) {
      float* row = out + m * ld_out;
      const char* src = bytes + ids[m] * row_bytes;
      if (packed) {
        unpack_row(table_dtype, file_row.data(), table, ids[m], V, D);
        src = file_row.data();
      }
      convert_to_f32(row, src, table_dtype, static_cast<size_t>(D));
      if (scale != 1.0f)
        for (int64_t d = 0; d < D; ++d) row[d] *= scale;
    }
  });
}

}  // namespace minfer::cpu
