#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_naive.cuh"

namespace minfer::cuda {

namespace {
// threadIdx.x runs along n: neighbouring threads read neighbouring weight rows (strided), but
// the same activation value (broadcast).
template <class T>
__global__ void gemm_naive_kernel(float* out, int64_t ld_out, const float* x, int64_t ld_x, const T* w, int64_t M,
                                  int64_t N, int64_t K) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t m = blockIdx.y * int64_t(blockDim.y) + threadIdx.y;
  if (m >= M || n >= N) return;
  float acc = 0.0f;
  for (int64_t k = 0; k < K; ++k) acc += x[m * ld_x + k] * to_float(w[n * K + k]);
  out[m * ld_out + n] = acc;
}
}  // namespace

void gemm_naive(cudaStream_t stream, float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w,
                DType w_dtype, int64_t M, int64_t N, int64_t K) {
  if (M == 0 || N == 0) return;
  const dim3 block(32, 8), grid(blocks_for(N, 32), blocks_for(M, 8));
  dispatch_float_type(w_dtype, [&](auto type) {
    using T = decltype(type);
    gemm_naive_kernel<T><<<grid, block, 0, stream>>>(out, ld_out, x, ld_x, static_cast<const T*>(w), M, N, K);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
