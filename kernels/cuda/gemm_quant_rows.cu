#include "core/quants_blocks.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_quant_rows.cuh"

namespace minfer::cuda {

namespace {

constexpr int kTileN = kQuantRowsTileN, kSlice = kQuantRowsSlice, kPatchN = 4;  // 16 x 16 threads, 4 weight rows each
constexpr int kThreads = 256;

// TM: activation rows per block (16, 32 or 64), each thread taking TM / 16 of them. Block
// (blockIdx.x, split) sums its split's slices of K into out, or with several splits into its
// partial, partials + split * M * N (M, N).
template <class Block, int TM>
__global__ void gemm_quant_rows_kernel(float* out, int64_t ld_out, const float* x, int64_t ld_x, const Block* w,
                                       int64_t M, int64_t N, int64_t K, float* partials) {
  constexpr int kWeights = blocks::Traits<Block>::kWeights;
  constexpr int kPatchM = TM / 16;
  // note: both tiles are k-major ([k][row]), as in gemm_tiled, so that a thread reads its 4 weight
  // rows (and with 64 rows its 4 activation rows) of one k in one 16-byte load; rows padded by 4
  // floats keep those loads aligned. The dequantizing threads take consecutive weight rows, so a
  // warp's stores of one k fall on 32 different banks.
  constexpr int kLdX = TM + 4, kLdW = kTileN + 4;
  __shared__ __align__(16) float xs[kSlice][kLdX];
  __shared__ __align__(16) float ws[kSlice][kLdW];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16, tid = threadIdx.x;
  const int64_t n0 = blockIdx.x * int64_t(kTileN);
  const int64_t blocks_per_row = K / kWeights;
  // The weight group this thread dequantizes at every slice: row n0 + wr, weights 8 wg .. 8 wg + 7.
  const int wr = tid % kTileN, wg = tid / kTileN;
  const Block* w_row = n0 + wr < N ? w + (n0 + wr) * blocks_per_row : nullptr;
  float acc[kPatchM][kPatchN] = {};
  const int64_t split_k = quant_rows_split_slices(K, gridDim.y) * kSlice;
  const int64_t k_end = min(K, (blockIdx.y + 1) * split_k);
  for (int64_t k0 = blockIdx.y * split_k; k0 < k_end; k0 += kSlice) {
    {
      float v[8] = {};
      if (w_row != nullptr) {
        const int64_t k = k0 + 8 * wg;  // whole blocks: k < K, and a group never straddles blocks
        blocks::dequantize8(w_row[k / kWeights], static_cast<int>(k % kWeights / 8), v);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) ws[8 * wg + j][wr] = v[j];
    }
    for (int i = tid; i < TM * kSlice; i += kThreads) {
      const int r = i / kSlice, k = i % kSlice;
      xs[k][r] = r < M ? x[r * ld_x + k0 + k] : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < kSlice; ++k) {
      float a[kPatchM];
      if constexpr (kPatchM == 4) {
        const float4 a4 = *reinterpret_cast<const float4*>(&xs[k][ty * 4]);
        a[0] = a4.x; a[1] = a4.y; a[2] = a4.z; a[3] = a4.w;
      } else {
#pragma unroll
        for (int i = 0; i < kPatchM; ++i) a[i] = xs[k][ty * kPatchM + i];
      }
      const float4 b4 = *reinterpret_cast<const float4*>(&ws[k][tx * kPatchN]);
      const float b[kPatchN] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
      for (int i = 0; i < kPatchM; ++i)
#pragma unroll
        for (int j = 0; j < kPatchN; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
  // A split past the last slice (K shorter than the splits' share) writes zeros.
  float* partial = gridDim.y > 1 ? partials + blockIdx.y * M * N : nullptr;
#pragma unroll
  for (int i = 0; i < kPatchM; ++i)
#pragma unroll
    for (int j = 0; j < kPatchN; ++j) {
      const int64_t m = ty * kPatchM + i, n = n0 + tx * kPatchN + j;
      if (m >= M || n >= N) continue;
      if (partial != nullptr)
        partial[m * N + n] = acc[i][j];
      else
        out[m * ld_out + n] = acc[i][j];
    }
}

// out (M, N) = the splits' partials added in split order.
__global__ void add_splits_kernel(float* out, int64_t ld_out, const float* partials, int64_t k_splits, int64_t M,
                                  int64_t N) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * N; i += int64_t(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int64_t s = 0; s < k_splits; ++s) sum += partials[s * M * N + i];
    out[(i / N) * ld_out + i % N] = sum;
  }
}

// note: 64 weight rows x 32 weights of a slice are 256 groups of 8, one per thread; a thread's
// patch of 4 weight rows is one float4.
static_assert(kTileN * kSlice / 8 == kThreads && kPatchN == 4, "one weight group per thread and slice");

template <class Block, int TM>
void launch(cudaStream_t stream, float* out, int64_t ld_out, const float* x, int64_t ld_x, const Block* w, int64_t M,
            int64_t N, int64_t K, int64_t k_splits, float* partials) {
  const dim3 grid(blocks_for(N, kTileN), static_cast<unsigned>(k_splits));
  gemm_quant_rows_kernel<Block, TM><<<grid, kThreads, 0, stream>>>(out, ld_out, x, ld_x, w, M, N, K, partials);
}

}  // namespace

int64_t gemm_quant_rows_floats(int64_t M, int64_t N, int64_t k_splits) { return k_splits > 1 ? k_splits * M * N : 0; }

void gemm_quant_rows(cudaStream_t stream, float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w,
                     DType w_dtype, int64_t M, int64_t N, int64_t K, int64_t k_splits, float* partials) {
  MINFER_CHECK(M >= 1 && M <= kQuantRowsMaxRows, "gemm_quant_rows takes 1 to ", kQuantRowsMaxRows, " rows, got ", M);
  MINFER_CHECK(is_quantized(w_dtype), "gemm_quant_rows: ", dtype_name(w_dtype), " is not a quantized type");
  MINFER_CHECK(K % dtype_block(w_dtype) == 0, "gemm_quant_rows: ", dtype_name(w_dtype), " rows of ", K,
               " weights are not whole blocks");
  MINFER_CHECK(k_splits >= 1 && k_splits <= 65535 && (k_splits == 1 || partials != nullptr), "gemm_quant_rows: ",
               k_splits, " splits of K", partials == nullptr ? " and no partials" : "");
  if (N == 0) return;
  blocks::dispatch_block(w_dtype, [&](auto tag) {
    using Block = typename decltype(tag)::type;
    const auto* weights = static_cast<const Block*>(w);
    if (M <= 16)
      launch<Block, 16>(stream, out, ld_out, x, ld_x, weights, M, N, K, k_splits, partials);
    else if (M <= 32)
      launch<Block, 32>(stream, out, ld_out, x, ld_x, weights, M, N, K, k_splits, partials);
    else
      launch<Block, 64>(stream, out, ld_out, x, ld_x, weights, M, N, K, k_splits, partials);
  });
  CUDA_CHECK_LAUNCH();
  if (k_splits > 1) {
    const unsigned blocks = blocks_for(M * N, 256) < 4096 ? blocks_for(M * N, 256) : 4096;
    add_splits_kernel<<<blocks, 256, 0, stream>>>(out, ld_out, partials, k_splits, M, N);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace minfer::cuda
