#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding.cuh"

namespace minfer::cuda {

namespace {
template <class T>
__global__ void embedding_kernel(float* out, int64_t ld_out, const T* table, const int32_t* ids, int64_t D) {
  const int64_t m = blockIdx.x;
  const T* row = table + int64_t(ids[m]) * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) out[m * ld_out + d] = to_float(row[d]);
}

__global__ void embedding_q8_0_kernel(float* out, int64_t ld_out, const BlockQ8* table, const int32_t* ids,
                                      int64_t D) {
  const int64_t m = blockIdx.x;
  const BlockQ8* row = table + int64_t(ids[m]) * (D / 32);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    const BlockQ8& block = row[d / 32];
    out[m * ld_out + d] = __half2float(__ushort_as_half(block.d)) * block.q[d % 32];
  }
}
}  // namespace

void embedding(cudaStream_t stream, float* out, int64_t ld_out, const void* table, DType table_dtype,
               const int32_t* ids, int64_t M, int64_t D) {
  if (M == 0) return;
  if (table_dtype == DType::q8_0) {
    MINFER_CHECK(D % 32 == 0, "embedding: q8_0 rows of ", D, " values are not whole blocks");
    embedding_q8_0_kernel<<<static_cast<unsigned>(M), 256, 0, stream>>>(out, ld_out,
                                                                         static_cast<const BlockQ8*>(table), ids, D);
    CUDA_CHECK_LAUNCH();
    return;
  }
  dispatch_float_type(table_dtype, [&](auto type) {
    using T = decltype(type);
    embedding_kernel<T><<<static_cast<unsigned>(M), 256, 0, stream>>>(out, ld_out, static_cast<const T*>(table), ids, D);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
