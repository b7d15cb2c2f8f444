#include "kernels/cuda/common.cuh"
#include "kernels/cuda/softmax.cuh"

namespace minfer::cuda {

namespace {
__global__ void softmax_kernel(float* x, int64_t ld_x, int64_t N) {
  __shared__ float shared[32];
  float* row = x + blockIdx.x * ld_x;
  float local_max = -INFINITY;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) local_max = fmaxf(local_max, row[i]);
  const float row_max = block_max(local_max, shared);
  float local_sum = 0.0f;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    const float e = expf(row[i] - row_max);
    row[i] = e;
    local_sum += e;
  }
  const float inverse = 1.0f / block_sum(local_sum, shared);
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) row[i] *= inverse;
}
}  // namespace

void softmax(cudaStream_t stream, float* x, int64_t ld_x, int64_t M, int64_t N) {
  if (M == 0) return;
  softmax_kernel<<<static_cast<unsigned>(M), 256, 0, stream>>>(x, ld_x, N);
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
