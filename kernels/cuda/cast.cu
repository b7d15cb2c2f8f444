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
constexpr float kF16Max = 65504.0f;

// The power of two s that brings the largest magnitude `absmax` within f16's range (1 where it
// already is, or where absmax is not finite: an infinity or NaN in x stays one).
__device__ __forceinline__ float f16_scale(float absmax) {
  float s = 1.0f;
  if (isfinite(absmax))
    while (absmax * s > kF16Max) s *= 0.5f;
  return s;
}

// Pass 1: x to f16 unscaled, and the largest |x| into *absmax_bits (non-negative floats order as
// their bits do), one atomic per block.
__global__ void cast_f16_absmax_kernel(__half* out, const float* x, int64_t ld_x, int64_t M, int64_t K,
                                       unsigned* absmax_bits) {
  __shared__ float shared[32];
  float local = 0.0f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * K; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = x[(i / K) * ld_x + i % K];
    out[i] = __float2half_rn(v);
    local = fmaxf(local, fabsf(v));
  }
  const float block = block_max(local, shared);
  if (threadIdx.x == 0) atomicMax(absmax_bits, __float_as_uint(block));
}

// Pass 2: alpha and beta for the product, and only where something overflowed, x again, scaled.
__global__ void cast_f16_rescale_kernel(__half* out, const float* x, int64_t ld_x, int64_t M, int64_t K,
                                        const unsigned* absmax_bits, float* alpha_beta) {
  const float s = f16_scale(__uint_as_float(*absmax_bits));
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    alpha_beta[0] = 1.0f / s;  // exact: s is a power of two
    alpha_beta[1] = 0.0f;
  }
  if (s == 1.0f) return;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * K; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2half_rn(x[(i / K) * ld_x + i % K] * s);
}
}  // namespace

void cast_rows_f16_scaled(cudaStream_t stream, __half* out, const float* x, int64_t ld_x, int64_t M, int64_t K,
                          float* alpha_beta, unsigned* absmax_bits) {
  CUDA_CHECK(cudaMemsetAsync(absmax_bits, 0, sizeof(unsigned), stream));
  // note: at most 1024 blocks (grid-stride loops), so pass 1 makes at most 1024 atomics on one word.
  const unsigned blocks = blocks_for(M * K, 256) < 1024 ? blocks_for(M * K, 256) : 1024;
  if (M * K > 0) {
    cast_f16_absmax_kernel<<<blocks, 256, 0, stream>>>(out, x, ld_x, M, K, absmax_bits);
    CUDA_CHECK_LAUNCH();
  }
  cast_f16_rescale_kernel<<<blocks > 0 ? blocks : 1, 256, 0, stream>>>(out, x, ld_x, M, K, absmax_bits, alpha_beta);
  CUDA_CHECK_LAUNCH();
}

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
