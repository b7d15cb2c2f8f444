#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_tiled.cuh"

namespace minfer::cuda {

namespace {
constexpr int kTile = 64, kSlice = 16, kPatch = 4;  // 16 x 16 threads, each a 4 x 4 patch

template <class T>
__global__ void gemm_tiled_kernel(float* out, int64_t ld_out, const float* x, int64_t ld_x, const T* w, int64_t M,
                                  int64_t N, int64_t K) {
  // note: both tiles are stored k-major ([k][row]) so that the inner loop reads 4 consecutive
  // rows of one k with consecutive threads on consecutive addresses; +1 column of padding keeps
  // the transposing stores off a single bank.
  __shared__ float xs[kSlice][kTile + 1];
  __shared__ float ws[kSlice][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
  const int64_t m0 = blockIdx.y * int64_t(kTile), n0 = blockIdx.x * int64_t(kTile);
  float acc[kPatch][kPatch] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kSlice) {
    for (int i = tid; i < kTile * kSlice; i += 256) {  // 64 rows x 16 k of each operand
      const int r = i / kSlice, k = i % kSlice;
      const bool in_k = k0 + k < K;
      xs[k][r] = (m0 + r < M && in_k) ? x[(m0 + r) * ld_x + k0 + k] : 0.0f;
      ws[k][r] = (n0 + r < N && in_k) ? to_float(w[(n0 + r) * K + k0 + k]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kSlice; ++k) {
      float a[kPatch], b[kPatch];
#pragma unroll
      for (int i = 0; i < kPatch; ++i) {
        a[i] = xs[k][ty * kPatch + i];
        b[i] = ws[k][tx * kPatch + i];
      }
#pragma unroll
      for (int i = 0; i < kPatch; ++i)
#pragma unroll
        for (int j = 0; j < kPatch; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kPatch; ++i)
#pragma unroll
    for (int j = 0; j < kPatch; ++j) {
      const int64_t m = m0 + ty * kPatch + i, n = n0 + tx * kPatch + j;
      if (m < M && n < N) out[m * ld_out + n] = acc[i][j];
    }
}
}  // namespace

void gemm_tiled(cudaStream_t stream, float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w,
                DType w_dtype, int64_t M, int64_t N, int64_t K) {
  if (M == 0 || N == 0) return;
  const dim3 block(16, 16), grid(blocks_for(N, kTile), blocks_for(M, kTile));
  dispatch_float_type(w_dtype, [&](auto type) {
    using T = decltype(type);
    gemm_tiled_kernel<T><<<grid, block, 0, stream>>>(out, ld_out, x, ld_x, static_cast<const T*>(w), M, N, K);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
