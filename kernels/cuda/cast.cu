#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/common.cuh"

namespace minfer::cuda {

namespace {
template <class T>
__global__ void cast_kernel(T* out, const float* x, int64_t ld_x, int64_t M, int64_t K) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * K; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_float<T>(x[(i / K) * ld_x + i % K]);
}
}  // namespace

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
