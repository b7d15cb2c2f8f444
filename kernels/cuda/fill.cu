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

// One thread per block of 32: the same values as the f32 fill, quantized by llama.cpp's rule as
// core/dtype.cpp does it on the host (IEEE division and roundf, so the bytes agree).
__global__ void fill_q8_0_kernel(BlockQ8* t, int64_t n_blocks, uint64_t seed, float lo, float hi) {
  for (int64_t b = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; b < n_blocks;
       b += int64_t(gridDim.x) * blockDim.x) {
    float v[32];
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      v[j] = ref::uniform_at(seed, uint64_t(b * 32 + j), lo, hi);
      amax = fmaxf(amax, fabsf(v[j]));
    }
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    t[b].d = __half_as_ushort(__float2half_rn(d));
    for (int j = 0; j < 32; ++j) t[b].q[j] = static_cast<int8_t>(roundf(__fmul_rn(v[j], id)));
  }
}
}  // namespace

void fill_uniform(cudaStream_t stream, void* t, DType dtype, int64_t n, uint64_t seed, float lo, float hi) {
  if (n == 0) return;
  if (dtype == DType::q8_0) {
    MINFER_CHECK(n % 32 == 0, "fill_uniform: ", n, " elements are not whole q8_0 blocks");
    const int64_t n_blocks = n / 32;
    const unsigned grid = blocks_for(n_blocks, 128) < 65535 ? blocks_for(n_blocks, 128) : 65535;
    fill_q8_0_kernel<<<grid, 128, 0, stream>>>(static_cast<BlockQ8*>(t), n_blocks, seed, lo, hi);
    CUDA_CHECK_LAUNCH();
    return;
  }
  const unsigned blocks = blocks_for(n, 256) < 65535 * 4 ? blocks_for(n, 256) : 65535 * 4;
  dispatch_float_type(dtype, [&](auto type) {
    using T = decltype(type);
    fill_kernel<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(t), n, seed, lo, hi);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
