#include "kernels/cpu/kv_store.h"

#include <cstring>

#include "kernels/cpu/parallel.h"

namespace minfer::cpu {

void kv_store(ThreadPool& pool, float* k_cache, float* v_cache, const float* k, int64_t ld_k,
              const float* v, int64_t ld_v, const int32_t* seq, const int32_t* pos, int64_t M,
              int64_t kv_dim, int64_t S) {
  const size_t row_bytes = static_cast<size_t>(kv_dim) * sizeof(float);
  for_rows(pool, M, 2 * kv_dim, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      int64_t slot = (int64_t(seq[m]) * S + pos[m]) * kv_dim;
      std::memcpy(k_cache + slot, k + m * ld_k, row_bytes);
      std::memcpy(v_cache + slot, v + m * ld_v, row_bytes);
    }
  });
}

}  // namespace minfer::cpu
