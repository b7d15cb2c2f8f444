#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rmsnorm.cuh"

namespace minfer::cuda {

namespace {
// One block per run of D values: run r is row r / groups, its (r % groups)-th D.
template <bool kResidual>
__global__ void rmsnorm_kernel(float* x, int64_t ld_x, const float* delta, int64_t ld_delta, float* out,
                               int64_t ld_out, const float* weight, int64_t D, float eps, int64_t groups) {
  __shared__ float shared[32];
  const int64_t m = blockIdx.x / groups, at = (blockIdx.x % groups) * D;
  float* row = x + m * ld_x + at;
  float squares = 0.0f;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float v = row[d];
    if constexpr (kResidual) {
      v += delta[m * ld_delta + d];
      row[d] = v;  // read back below by this same thread only
    }
    squares += v * v;
  }
  const float scale = rsqrtf(block_sum(squares, shared) / static_cast<float>(D) + eps);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) out[m * ld_out + at + d] = weight[d] * (scale * row[d]);
}

unsigned threads_for(int64_t D) { return D >= 1024 ? 1024 : D >= 256 ? 256 : 128; }
}  // namespace

void rmsnorm(cudaStream_t stream, float* out, int64_t ld_out, const float* x, int64_t ld_x, const float* weight,
             int64_t M, int64_t D, float eps, int64_t groups) {
  if (M == 0) return;
  // x is only read when kResidual is false.
  rmsnorm_kernel<false><<<static_cast<unsigned>(M * groups), threads_for(D), 0, stream>>>(
      const_cast<float*>(x), ld_x, nullptr, 0, out, ld_out, weight, D, eps, groups);
  CUDA_CHECK_LAUNCH();
}

void residual_rmsnorm(cudaStream_t stream, float* out, int64_t ld_out, float* x, int64_t ld_x, const float* delta,
                      int64_t ld_delta, const float* weight, int64_t M, int64_t D, float eps) {
  if (M == 0) return;
  rmsnorm_kernel<true><<<static_cast<unsigned>(M), threads_for(D), 0, stream>>>(x, ld_x, delta, ld_delta, out,
                                                                                 ld_out, weight, D, eps, 1);
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
