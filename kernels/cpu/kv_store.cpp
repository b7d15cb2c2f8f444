#include "kernels/cpu/kv_store.h"

#include <cstring>

#include "kernels/cpu/parallel.h"
#include "kernels/ref/kv_store.h"

namespace minfer::cpu {

void store_row(void* k_cache, void* v_cache, DType cache_dtype, const float* k_row, const float* v_row,
               int32_t seq, int32_t pos, int64_t n_kv_heads, int64_t head_dim, const ref::KvBlockTable& table) {
  for (int64_t h = 0; h < n_kv_heads; ++h) {
    const int64_t slot = ref::kv_cache_offset(table, seq, h, pos, n_kv_heads, head_dim);
    if (cache_dtype == DType::f16) {
      convert_from_f32(static_cast<uint16_t*>(k_cache) + slot, DType::f16, k_row + h * head_dim, size_t(head_dim));
      convert_from_f32(static_cast<uint16_t*>(v_cache) + slot, DType::f16, v_row + h * head_dim, size_t(head_dim));
    } else {
      const size_t head_bytes = static_cast<size_t>(head_dim) * sizeof(float);
      std::memcpy(static_cast<float*>(k_cache) + slot, k_row + h * head_dim, head_bytes);
      std::memcpy(static_cast<float*>(v_cache) + slot, v_row + h * head_dim, head_bytes);
    }
  }
}

void kv_store(ThreadPool& pool, void* k_cache, void* v_cache, DType cache_dtype, const float* k, int64_t ld_k,
              const float* v, int64_t ld_v, const int32_t* seq, const int32_t* pos, int64_t M,
              int64_t n_kv_heads, int64_t head_dim, const ref::KvBlockTable& table) {
  for_rows(pool, M, 2 * n_kv_heads * head_dim, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m)
      store_row(k_cache, v_cache, cache_dtype, k + m * ld_k, v + m * ld_v, seq[m], pos[m], n_kv_heads,
                head_dim, table);
  });
}

}  // namespace minfer::cpu
