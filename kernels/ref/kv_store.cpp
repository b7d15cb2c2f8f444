#include "kernels/ref/kv_store.h"

#include "kernels/ref/element.h"

namespace minfer::ref {

void kv_store(void* k_cache, void* v_cache, DType cache_dtype, const float* k, int64_t ld_k,
              const float* v, int64_t ld_v, const int32_t* seq, const int32_t* pos, int64_t M,
              int64_t n_kv_heads, int64_t head_dim, const KvBlockTable& table) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t h = 0; h < n_kv_heads; ++h) {
      const int64_t slot = kv_cache_offset(table, seq[m], h, pos[m], n_kv_heads, head_dim);
      for (int64_t i = 0; i < head_dim; ++i) {
        store_element(k_cache, cache_dtype, slot + i, k[m * ld_k + h * head_dim + i]);
        store_element(v_cache, cache_dtype, slot + i, v[m * ld_v + h * head_dim + i]);
      }
    }
}

}  // namespace minfer::ref
