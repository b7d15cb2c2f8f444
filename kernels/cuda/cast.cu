#include "core/quants_blocks.h"
#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/common.cuh"

namespace minfer::cuda {

namespace {
template <class T>
__global__ void cast_kernel(T* out, const float* x, int64_t ld_x, int64_t M, int64_t K) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * K; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_float<T>(x[(i / K) * ld_x + i % K]);
}

// Thread i dequantizes group i of 8 weights (of all N * K, the rows being whole blocks end to end).
template <class Block>
__global__ void dequantize_kernel(__half* out, const Block* w, int64_t n_groups) {
  constexpr int kGroups = blocks::Traits<Block>::kWeights / 8;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_groups; i += int64_t(gridDim.x) * blockDim.x) {
    float v[8];
    blocks::dequantize8(w[i / kGroups], static_cast<int>(i % kGroups), v);
#pragma unroll
    for (int j = 0; j < 8; ++j) out[8 * i + j] = __float2half_rn(v[j]);
  }
}
}  // namespace

void dequantize_rows(cudaStream_t stream, __half* out, const void* w, DType w_dtype, int64_t N, int64_t K) {
  MINFER_CHECK(is_quantized(w_dtype), "dequantize_rows: ", dtype_name(w_dtype), " is not a quantized type");
  MINFER_CHECK(K % dtype_block(w_dtype) == 0, "dequantize_rows: ", dtype_name(w_dtype), " rows of ", K,
               " weights are not whole blocks");
  if (N * K == 0) return;
  const int64_t n_groups = N * K / 8;
  const unsigned grid = blocks_for(n_groups, 256) < 65535 * 4 ? blocks_for(n_groups, 256) : 65535 * 4;
  blocks::dispatch_block(w_dtype, [&](auto tag) {
    using Block = typename decltype(tag)::type;
    dequantize_kernel<Block><<<grid, 256, 0, stream>>>(out, static_cast<const Block*>(w), n_groups);
  });
  CUDA_CHECK_LAUNCH();
}

void cast_rows(cudaStream_t stream, void* out, DType out_dtype, const float* x, int64_t ld_x, int64_t M, int64_t K) {
  if (M * K == 0) return;
  const unsigned blocks = blocks_for(M * K, 256) < 65535 ? blocks_for(M * K, 256) : 65535;
  dispatch_float_type(out_dtype, [&](auto type) {
    using T = decltype(type);
    cast_kernel<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(out), x, ld_x, M, K);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
