#include "kernels/cuda/argmax.cuh"
#include "kernels/cuda/common.cuh"

namespace minfer::cuda {

namespace {
__device__ __forceinline__ bool better(float v, int64_t i, float best_v, int64_t best_i) {
  return v > best_v || (v == best_v && i < best_i);
}

__global__ void argmax_kernel(int32_t* out, const float* x, int64_t ld_x, int64_t N) {
  __shared__ float values[32];
  __shared__ int64_t indices[32];
  const float* row = x + blockIdx.x * ld_x;
  float best_v = -INFINITY;
  int64_t best_i = N;  // "no candidate yet": loses every tie
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x)
    if (better(row[i], i, best_v, best_i)) {
      best_v = row[i];
      best_i = i;
    }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_xor_sync(kFullMask, best_v, offset);
    const int64_t i = __shfl_xor_sync(kFullMask, best_i, offset);
    if (better(v, i, best_v, best_i)) {
      best_v = v;
      best_i = i;
    }
  }
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (lane == 0) {
    values[warp] = best_v;
    indices[warp] = best_i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < int(blockDim.x / kWarpSize); ++w)
      if (better(values[w], indices[w], best_v, best_i)) {
        best_v = values[w];
        best_i = indices[w];
      }
    out[blockIdx.x] = static_cast<int32_t>(best_i < N ? best_i : 0);
  }
}
}  // namespace

void argmax(cudaStream_t stream, int32_t* out, const float* x, int64_t ld_x, int64_t M, int64_t N) {
  if (M == 0) return;
  argmax_kernel<<<static_cast<unsigned>(M), 256, 0, stream>>>(out, x, ld_x, N);
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
