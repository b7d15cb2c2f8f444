#include "core/quants_blocks.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_quant_rows.cuh"

namespace minfer::cuda {

namespace {

constexpr int kTileN = 64, kSlice = 32, kPatchN = 4;  // 16 x 16 threads, a patch of 4 weight rows each
constexpr int kThreads = 256;

// TM: activation rows per block (16, 32 or 64), each thread taking TM / 16 of them.
template <class Block, int TM>
__global__ void gemm_quant_rows_kernel(float* out, int64_t ld_out, const float* x, int64_t ld_x, const Block* w,
                                       int64_t M, int64_t N, int64_t K) {
  constexpr int kWeights = blocks::Traits<Block>::kWeights;
  constexpr int kPatchM = TM / 16;
  // note: both tiles are k-major ([k][row]), as in gemm_tiled, so that the inner loop reads
  // consecutive rows of one k on consecutive threads; +1 column of padding keeps the transposing
  // stores off a single bank.
  __shared__ float xs[kSlice][TM + 1];
  __shared__ float ws[kSlice][kTileN + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16, tid = threadIdx.x;
  const int64_t n0 = blockIdx.x * int64_t(kTileN);
  const int64_t blocks_per_row = K / kWeights;
  // The weight group this thread dequantizes at every slice: row n0 + wr, weights 8 wg .. 8 wg + 7.
  const int wr = tid / (kSlice / 8), wg = tid % (kSlice / 8);
  const Block* w_row = n0 + wr < N ? w + (n0 + wr) * blocks_per_row : nullptr;
  float acc[kPatchM][kPatchN] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kSlice) {
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
      float a[kPatchM], b[kPatchN];
#pragma unroll
      for (int i = 0; i < kPatchM; ++i) a[i] = xs[k][ty * kPatchM + i];
#pragma unroll
      for (int j = 0; j < kPatchN; ++j) b[j] = ws[k][tx * kPatchN + j];
#pragma unroll
      for (int i = 0; i < kPatchM; ++i)
#pragma unroll
        for (int j = 0; j < kPatchN; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kPatchM; ++i)
#pragma unroll
    for (int j = 0; j < kPatchN; ++j) {
      const int64_t m = ty * kPatchM + i, n = n0 + tx * kPatchN + j;
      if (m < M && n < N) out[m * ld_out + n] = acc[i][j];
    }
}

// note: 64 weight rows x 32 weights of a slice are 256 groups of 8, one per thread.
static_assert(kTileN * kSlice / 8 == kThreads, "one weight group per thread and slice");

template <class Block, int TM>
void launch(cudaStream_t stream, float* out, int64_t ld_out, const float* x, int64_t ld_x, const Block* w, int64_t M,
            int64_t N, int64_t K) {
  gemm_quant_rows_kernel<Block, TM>
      <<<blocks_for(N, kTileN), kThreads, 0, stream>>>(out, ld_out, x, ld_x, w, M, N, K);
}

}  // namespace

void gemm_quant_rows(cudaStream_t stream, float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w,
                     DType w_dtype, int64_t M, int64_t N, int64_t K) {
  MINFER_CHECK(M >= 1 && M <= kQuantRowsMaxRows, "gemm_quant_rows takes 1 to ", kQuantRowsMaxRows, " rows, got ", M);
  MINFER_CHECK(is_quantized(w_dtype), "gemm_quant_rows: ", dtype_name(w_dtype), " is not a quantized type");
  MINFER_CHECK(K % dtype_block(w_dtype) == 0, "gemm_quant_rows: ", dtype_name(w_dtype), " rows of ", K,
               " weights are not whole blocks");
  if (N == 0) return;
  blocks::dispatch_block(w_dtype, [&](auto tag) {
    using Block = typename decltype(tag)::type;
    const auto* weights = static_cast<const Block*>(w);
    if (M <= 16)
      launch<Block, 16>(stream, out, ld_out, x, ld_x, weights, M, N, K);
    else if (M <= 32)
      launch<Block, 32>(stream, out, ld_out, x, ld_x, weights, M, N, K);
    else
      launch<Block, 64>(stream, out, ld_out, x, ld_x, weights, M, N, K);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
