#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fill.cuh"
#include "kernels/ref/fill.h"

namespace minfer::cuda {

namespace {
template <class T>
__global__ void fill_kernel(T* t, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    t[i] = from_float<T>(ref::uniform_at(seed, uint64_t(i), lo, hi));
}
}  // namespace

void fill_uniform(cudaStream_t stream, void* t, DType dtype, int64_t n, uint64_t seed, float lo, float hi) {
  if (n == 0) return;
  const unsigned blocks = blocks_for(n, 256) < 65535 * 4 ? blocks_for(n, 256) : 65535 * 4;
  dispatch_float_type(dtype, [&](auto type) {
    using T = decltype(type);
    fill_kernel<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(t), n, seed, lo, hi);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
