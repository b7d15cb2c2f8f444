#include "kernels/cpu/kv_store.h"

#include <cstring>

#include "kernels/cpu/parallel.h"

namespace minfer::cpu {

void store_row(float* k_cache, float* v_cache, const float* k_row, const float* v_row, int32_t seq,
               int32_t pos, int64_t n_kv_heads, int64_t head_dim, int64_t n_ctx) {
  const size_t head_bytes = static_cast<size_t>(head_dim) * sizeof(float);
  for (int64_t h = 0; h < n_kv_heads; ++h) {
    int64_t slot = ((int64_t(seq) * n_kv_heads + h) * n_ctx + pos) * head_dim;
    std::memcpy(k_cache + slot, k_row + h * head_dim, head_bytes);
    std::memcpy(v_cache + slot, v_row + h * head_dim, head_bytes);
  }
}

void kv_store(ThreadPool& pool, float* k_cache, float* v_cache, const float* k, int64_t ld_k,
              const float* v, int64_t ld_v, const int32_t* seq, const int32_t* pos, int64_t M,
              int64_t n_kv_heads, int64_t head_dim, int64_t n_ctx) {
  for_rows(pool, M, 2 * n_kv_heads * head_dim, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m)
      store_row(k_cache, v_cache, k + m * ld_k, v + m * ld_v, seq[m], pos[m], n_kv_heads, head_dim, n_ctx);
  });
}

}  // namespace minfer::cpu
