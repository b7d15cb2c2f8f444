#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_store.cuh"
#include "kernels/ref/kv_store.h"

namespace minfer::cuda {

namespace {
template <class T>
__global__ void kv_store_kernel(T* k_cache, T* v_cache, const float* k, int64_t ld_k, const float* v, int64_t ld_v,
                                const int32_t* seq, const int32_t* pos, int n_kv_heads, int head_dim,
                                ref::KvBlockTable table) {
  const int64_t m = blockIdx.x;
  for (int i = threadIdx.x; i < n_kv_heads * head_dim; i += blockDim.x) {
    const int head = i / head_dim, d = i % head_dim;
    const int64_t slot = ref::kv_cache_offset(table, seq[m], head, pos[m], n_kv_heads, head_dim) + d;
    k_cache[slot] = from_float<T>(k[m * ld_k + i]);
    v_cache[slot] = from_float<T>(v[m * ld_v + i]);
  }
}
}  // namespace

void kv_store(cudaStream_t stream, void* k_cache, void* v_cache, DType cache_dtype, const float* k, int64_t ld_k,
              const float* v, int64_t ld_v, const int32_t* seq, const int32_t* pos, int64_t M, int64_t n_kv_heads,
              int64_t head_dim, const ref::KvBlockTable& table) {
  if (M == 0) return;
  dispatch_float_type(cache_dtype, [&](auto type) {
    using T = decltype(type);
    kv_store_kernel<T><<<static_cast<unsigned>(M), 128, 0, stream>>>(
        static_cast<T*>(k_cache), static_cast<T*>(v_cache), k, ld_k, v, ld_v, seq, pos,
        static_cast<int>(n_kv_heads), static_cast<int>(head_dim), table);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
