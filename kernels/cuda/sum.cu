#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sum.cuh"

namespace minfer::cuda {

namespace {
constexpr int kBlocks = 2048;  // 16 per SM on a 132-SM H100/H200: plenty of loads in flight
constexpr int kThreads = 512;

__global__ void sum_blocks(float* partials, const float* x, int64_t n) {
  __shared__ float shared[32];
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const int64_t n4 = n / 4;
  float s = 0.0f;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n4; i += int64_t(kBlocks) * kThreads) {
    const float4 v = x4[i];
    s += (v.x + v.y) + (v.z + v.w);
  }
  if (blockIdx.x == 0)  // the last n % 4 elements
    for (int64_t i = n4 * 4 + threadIdx.x; i < n; i += kThreads) s += x[i];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void sum_partials(float* out, const float* partials) {
  __shared__ float shared[32];
  float s = 0.0f;
  for (int i = threadIdx.x; i < kBlocks; i += blockDim.x) s += partials[i];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) out[0] = s;
}
}  // namespace

int64_t sum_partials_needed() { return kBlocks; }

void sum(cudaStream_t stream, float* out, const float* x, int64_t n, float* partials) {
  sum_blocks<<<kBlocks, kThreads, 0, stream>>>(partials, x, n);
  CUDA_CHECK_LAUNCH();
  sum_partials<<<1, 1024, 0, stream>>>(out, partials);
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
