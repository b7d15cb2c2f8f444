#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/common.cuh"

namespace minfer::cuda {

namespace {
template <class T>
__global__ void cast_kernel(T* out, const float* x, int64_t ld_x, int64_t M, int64_t K) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * K; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_float<T>(x[(i / K) * ld_x + i % K]);
}

__global__ void dequantize_q8_0_kernel(__half* out, const BlockQ8* w, int64_t n_weights) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_weights;
       i += int64_t(gridDim.x) * blockDim.x) {
    const BlockQ8& block = w[i / 32];
    out[i] = __float2half_rn(__half2float(__ushort_as_half(block.d)) * block.q[i % 32]);
  }
}
}  // namespace

void dequantize_q8_0_rows(cudaStream_t stream, __half* out, const BlockQ8* w, int64_t N, int64_t K) {
  MINFER_CHECK(K % 32 == 0, "dequantize_q8_0_rows: rows of ", K, " weights are not whole blocks");
  if (N * K == 0) return;
  const unsigned blocks = blocks_for(N * K, 256) < 65535 * 4 ? blocks_for(N * K, 256) : 65535 * 4;
  dequantize_q8_0_kernel<<<blocks, 256, 0, stream>>>(out, w, N * K);
  CUDA_CHECK_LAUNCH();
}

void cast_rows(cudaStream_t stream, void* out, DType out_dtype, const float* x, int64_t ld_x, int64_t M, int64_t K) {
  if (M * K == 0) return;
  const unsigned blocks = blocks_for(M * K, 256) < 65535 ? blocks_for(M * K, 256) : 65535;
  dispatch_float_type(out_dtype, [&](auto type) {
    using T = decltype(type);
    cast_kernel<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(out), x, ld_x, M, K);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
