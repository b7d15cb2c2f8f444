#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/ref/kv_store.h"

namespace minfer::cuda {

namespace {
// Pairs 0 .. n_q_heads * half - 1 are q's, the next n_kv_heads * half are k's.
template <bool kStoreKV, class T>
__global__ void rope_kernel(float* q, int64_t ld_q, int n_q_heads, float* k, int64_t ld_k, int n_kv_heads,
                            const float* v, int64_t ld_v, T* k_cache, T* v_cache, const int32_t* seq,
                            const int32_t* pos, const float* table, int head_dim,
                            ref::KvBlockTable cache_table) {
  const int64_t m = blockIdx.x;
  const int half = head_dim / 2;
  const float* angles = table + int64_t(pos[m]) * head_dim;
  const int pairs = (n_q_heads + n_kv_heads) * half;
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const bool is_k = p >= n_q_heads * half;
    const int local = is_k ? p - n_q_heads * half : p;
    const int head = local / half, j = local % half;
    float* pair = (is_k ? k + m * ld_k : q + m * ld_q) + head * head_dim + 2 * j;
    const float x0 = pair[0], x1 = pair[1], c = angles[2 * j], s = angles[2 * j + 1];
    const float r0 = x0 * c - x1 * s, r1 = x0 * s + x1 * c;
    pair[0] = r0;
    pair[1] = r1;
    if constexpr (kStoreKV) {
      if (is_k) {
        const int64_t slot = ref::kv_cache_offset(cache_table, seq[m], head, pos[m], n_kv_heads, head_dim) + 2 * j;
        const float* vp = v + m * ld_v + head * head_dim + 2 * j;
        k_cache[slot] = from_float<T>(r0);
        k_cache[slot + 1] = from_float<T>(r1);
        v_cache[slot] = from_float<T>(vp[0]);
        v_cache[slot + 1] = from_float<T>(vp[1]);
      }
    }
  }
}

unsigned threads_for(int64_t pairs) { return pairs >= 256 ? 256 : 128; }
}  // namespace

void rope(cudaStream_t stream, float* x, int64_t ld_x, const int32_t* pos, const float* table, int64_t M,
          int64_t n_heads, int64_t head_dim) {
  if (M == 0) return;
  rope_kernel<false, float><<<static_cast<unsigned>(M), threads_for(n_heads * head_dim / 2), 0, stream>>>(
      x, ld_x, static_cast<int>(n_heads), nullptr, 0, 0, nullptr, 0, nullptr, nullptr, nullptr, pos, table,
      static_cast<int>(head_dim), ref::KvBlockTable{});
  CUDA_CHECK_LAUNCH();
}

void rope_kv_store(cudaStream_t stream, void* k_cache, void* v_cache, DType cache_dtype, float* q, int64_t ld_q,
                   float* k, int64_t ld_k, const float* v, int64_t ld_v, const int32_t* seq, const int32_t* pos,
                   const float* table, int64_t M, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                   const ref::KvBlockTable& cache_table) {
  if (M == 0) return;
  dispatch_float_type(cache_dtype, [&](auto type) {
    using T = decltype(type);
    rope_kernel<true, T><<<static_cast<unsigned>(M), threads_for((n_heads + n_kv_heads) * head_dim / 2), 0, stream>>>(
        q, ld_q, static_cast<int>(n_heads), k, ld_k, static_cast<int>(n_kv_heads), v, ld_v,
        static_cast<T*>(k_cache), static_cast<T*>(v_cache), seq, pos, table, static_cast<int>(head_dim),
        cache_table);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
