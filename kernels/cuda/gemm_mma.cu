#include <mma.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_mma.cuh"

namespace minfer::cuda {

namespace {
namespace wmma = nvcuda::wmma;

constexpr int kTile = 64, kSlice = 32, kWarps = 4;
// note: rows are padded from 32 to 40 halves (80 bytes): WMMA needs a row stride that is a
// multiple of 16 bytes and fragment pointers aligned to 32 bytes, and the padding spreads the
// rows of a fragment over different banks.
constexpr int kLd = kSlice + 8;
constexpr int kLdOut = kTile + 4;

__global__ void gemm_mma_kernel(float* out, int64_t ld_out, const __half* x, const __half* w, const float* alpha,
                                int64_t M, int64_t N, int64_t K) {
  __shared__ __align__(32) __half xs[kTile * kLd];
  __shared__ __align__(32) __half ws[kTile * kLd];
  __shared__ __align__(32) float result[kTile * kLdOut];
  const int warp = threadIdx.x / kWarpSize;
  const int wm = warp / 2, wn = warp % 2;  // this warp's 32 x 32 quarter
  const int64_t m0 = blockIdx.y * int64_t(kTile), n0 = blockIdx.x * int64_t(kTile);
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  const __half zero = __float2half(0.0f);
  for (int64_t k0 = 0; k0 < K; k0 += kSlice) {
    for (int i = threadIdx.x; i < kTile * kSlice; i += kWarps * kWarpSize) {
      const int r = i / kSlice, k = i % kSlice;
      const bool in_k = k0 + k < K;
      xs[r * kLd + k] = (m0 + r < M && in_k) ? x[(m0 + r) * K + k0 + k] : zero;
      ws[r * kLd + k] = (n0 + r < N && in_k) ? w[(n0 + r) * K + k0 + k] : zero;
    }
    __syncthreads();
    for (int kk = 0; kk < kSlice; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[2];
      // w is stored (n, k): read column-major it is the (k, n) operand.
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], xs + (32 * wm + 16 * i) * kLd + kk, kLd);
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], ws + (32 * wn + 16 * j) * kLd + kk, kLd);
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(result + (32 * wm + 16 * i) * kLdOut + 32 * wn + 16 * j, acc[i][j], kLdOut,
                              wmma::mem_row_major);
  __syncthreads();
  const float scale = *alpha;
  for (int i = threadIdx.x; i < kTile * kTile; i += kWarps * kWarpSize) {
    const int r = i / kTile, c = i % kTile;
    if (m0 + r < M && n0 + c < N) out[(m0 + r) * ld_out + n0 + c] = scale * result[r * kLdOut + c];
  }
}
}  // namespace

void gemm_mma(cudaStream_t stream, float* out, int64_t ld_out, const __half* x16, const __half* w, const float* alpha,
              int64_t M, int64_t N, int64_t K) {
  if (M == 0 || N == 0) return;
  const dim3 grid(blocks_for(N, kTile), blocks_for(M, kTile));
  gemm_mma_kernel<<<grid, kWarps * kWarpSize, 0, stream>>>(out, ld_out, x16, w, alpha, M, N, K);
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
