#include "kernels/cpu/rope.h"

#include "kernels/cpu/kv_store.h"
#include "kernels/cpu/parallel.h"

namespace minfer::cpu {

namespace {

inline void rotate_row(float* row, const float* angles, int64_t n_heads, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* head = row + h * head_dim;
    for (int64_t j = 0; j < half; ++j) {
      float x0 = head[2 * j], x1 = head[2 * j + 1];
      float c = angles[2 * j], s = angles[2 * j + 1];
      head[2 * j] = x0 * c - x1 * s;
      head[2 * j + 1] = x0 * s + x1 * c;
    }
  }
}

}  // namespace

void rope(ThreadPool& pool, float* x, int64_t ld_x, const int32_t* pos, const float* table,
          int64_t M, int64_t n_heads, int64_t head_dim) {
  for_rows(pool, M, n_heads * head_dim, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m)
      rotate_row(x + m * ld_x, table + int64_t(pos[m]) * head_dim, n_heads, head_dim);
  });
}

void rope_kv_store(ThreadPool& pool, void* k_cache, void* v_cache, DType cache_dtype, float* q, int64_t ld_q,
                   float* k, int64_t ld_k, const float* v, int64_t ld_v, const int32_t* seq, const int32_t* pos, const float* table, int64_t M,
                   int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, const ref::KvBlockTable& cache_table) {
  for_rows(pool, M, (n_heads + 2 * n_kv_heads) * head_dim, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const float* angles = table + int64_t(pos[m]) * head_dim;
      rotate_row(q + m * ld_q, angles, n_heads, head_dim);
      rotate_row(k + m * ld_k, angles, n_kv_heads, head_dim);
      store_row(k_cache, v_cache, cache_dtype, k + m * ld_k, v + m * ld_v, seq[m], pos[m], n_kv_heads, head_dim,
                cache_table);
    }
  });
}

}  // namespace minfer::cpu
