#include <type_traits>

#include "core/quants_blocks.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fill.cuh"
#include "kernels/ref/fill.h"

namespace minfer::cuda {

namespace {
template <class T>
__global__ void fill_kernel(T* t, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    t[i] = from_float<T>(ref::uniform_at(seed, uint64_t(i), lo, hi));
}

// One thread per block of 32: the same values as the f32 fill, quantized by llama.cpp's rule as
// core/quants.cpp (quantize_q8_0) does it on the host (IEEE division and roundf, so the bytes agree).
__global__ void fill_q8_0_kernel(BlockQ8* t, int64_t n_blocks, uint64_t seed, float lo, float hi) {
  for (int64_t b = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; b < n_blocks;
       b += int64_t(gridDim.x) * blockDim.x) {
    float v[32];
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      v[j] = ref::uniform_at(seed, uint64_t(b * 32 + j), lo, hi);
      amax = fmaxf(amax, fabsf(v[j]));
    }
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    t[b].d = __half_as_ushort(__float2half_rn(d));
    for (int j = 0; j < 32; ++j) t[b].q[j] = static_cast<int8_t>(roundf(__fmul_rn(v[j], id)));
  }
}

// Q4_0, Q4_1, Q5_0, Q5_1: one thread per block of 32, quantized by the code core/quants.cpp runs on
// the host (core/quants_blocks.h, every operation rounded as there), so the bytes agree.
template <class Block>
__global__ void fill_blocks_kernel(Block* t, int64_t n_blocks, uint64_t seed, float lo, float hi) {
  for (int64_t b = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; b < n_blocks;
       b += int64_t(gridDim.x) * blockDim.x) {
    float v[32];
    for (int j = 0; j < 32; ++j) v[j] = ref::uniform_at(seed, uint64_t(b * 32 + j), lo, hi);
    blocks::quantize_block(t[b], v);
  }
}

// K-quants: one thread per super-block of ref::fill_k_quant_blocks' synthetic weights (random
// bytes, then f16 scales from max(|lo|, |hi|) so that no weight exceeds it), byte for byte: the
// bytes are the same integer hash, the scales one IEEE division each, rounded to f16 to nearest.
template <class Block>
__global__ void fill_k_quant_kernel(Block* t, int64_t n_blocks, uint64_t seed, float lo, float hi) {
  const float amp = fabsf(lo) < fabsf(hi) ? fabsf(hi) : fabsf(lo);  // std::max(|lo|, |hi|)
  for (int64_t b = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; b < n_blocks;
       b += int64_t(gridDim.x) * blockDim.x) {
    auto* bytes = reinterpret_cast<uint8_t*>(t + b);
    for (int i = 0; i < int(sizeof(Block)); ++i)
      bytes[i] = static_cast<uint8_t>(ref::mix64(ref::mix64(seed) ^ (uint64_t(b) * 256 + uint64_t(i))) >> 56);
    // The largest |w| each type can hold: d * (top scale) * (top code) + dmin * (top min).
    if constexpr (std::is_same_v<Block, BlockQ2_K>) {
      t[b].d = blocks::float_to_half(__fdiv_rn(amp, 90.0f));
      t[b].dmin = blocks::float_to_half(__fdiv_rn(amp, 30.0f));
    } else if constexpr (std::is_same_v<Block, BlockQ3_K>) {
      t[b].d = blocks::float_to_half(__fdiv_rn(amp, 128.0f));
    } else if constexpr (std::is_same_v<Block, BlockQ4_K>) {
      t[b].d = blocks::float_to_half(__fdiv_rn(amp, 1890.0f));
      t[b].dmin = blocks::float_to_half(__fdiv_rn(amp, 126.0f));
    } else if constexpr (std::is_same_v<Block, BlockQ5_K>) {
      t[b].d = blocks::float_to_half(__fdiv_rn(amp, 3906.0f));
      t[b].dmin = blocks::float_to_half(__fdiv_rn(amp, 126.0f));
    } else {
      t[b].d = blocks::float_to_half(__fdiv_rn(amp, 4096.0f));
    }
  }
}

template <class Block>
void launch_fill_k_quant(cudaStream_t stream, void* t, int64_t n, uint64_t seed, float lo, float hi) {
  const int64_t n_blocks = n / kQK;
  const unsigned grid = blocks_for(n_blocks, 128) < 65535 ? blocks_for(n_blocks, 128) : 65535;
  fill_k_quant_kernel<Block><<<grid, 128, 0, stream>>>(static_cast<Block*>(t), n_blocks, seed, lo, hi);
}

template <class Block>
void launch_fill_blocks(cudaStream_t stream, void* t, int64_t n, uint64_t seed, float lo, float hi) {
  const int64_t n_blocks = n / 32;
  const unsigned grid = blocks_for(n_blocks, 128) < 65535 ? blocks_for(n_blocks, 128) : 65535;
  fill_blocks_kernel<Block><<<grid, 128, 0, stream>>>(static_cast<Block*>(t), n_blocks, seed, lo, hi);
}
}  // namespace

void fill_uniform(cudaStream_t stream, void* t, DType dtype, int64_t n, uint64_t seed, float lo, float hi) {
  if (n == 0) return;
  if (dtype == DType::q8_0) {
    MINFER_CHECK(n % 32 == 0, "fill_uniform: ", n, " elements are not whole q8_0 blocks");
    const int64_t n_blocks = n / 32;
    const unsigned grid = blocks_for(n_blocks, 128) < 65535 ? blocks_for(n_blocks, 128) : 65535;
    fill_q8_0_kernel<<<grid, 128, 0, stream>>>(static_cast<BlockQ8*>(t), n_blocks, seed, lo, hi);
    CUDA_CHECK_LAUNCH();
    return;
  }
  if (is_k_quant(dtype)) {
    MINFER_CHECK(n % kQK == 0, "fill_uniform: ", n, " elements are not whole ", dtype_name(dtype), " blocks");
    switch (dtype) {
      case DType::q2_k: launch_fill_k_quant<BlockQ2_K>(stream, t, n, seed, lo, hi); break;
      case DType::q3_k: launch_fill_k_quant<BlockQ3_K>(stream, t, n, seed, lo, hi); break;
      case DType::q4_k: launch_fill_k_quant<BlockQ4_K>(stream, t, n, seed, lo, hi); break;
      case DType::q5_k: launch_fill_k_quant<BlockQ5_K>(stream, t, n, seed, lo, hi); break;
      default: launch_fill_k_quant<BlockQ6_K>(stream, t, n, seed, lo, hi); break;
    }
    CUDA_CHECK_LAUNCH();
    return;
  }
  if (is_quantized(dtype)) {  // q4_0, q4_1, q5_0, q5_1 (q8_0 above)
    MINFER_CHECK(n % 32 == 0, "fill_uniform: ", n, " elements are not whole ", dtype_name(dtype), " blocks");
    switch (dtype) {
      case DType::q4_0: launch_fill_blocks<BlockQ4_0>(stream, t, n, seed, lo, hi); break;
      case DType::q4_1: launch_fill_blocks<BlockQ4_1>(stream, t, n, seed, lo, hi); break;
      case DType::q5_0: launch_fill_blocks<BlockQ5_0>(stream, t, n, seed, lo, hi); break;
      default: launch_fill_blocks<BlockQ5_1>(stream, t, n, seed, lo, hi); break;
    }
    CUDA_CHECK_LAUNCH();
    return;
  }
  const unsigned blocks = blocks_for(n, 256) < 65535 * 4 ? blocks_for(n, 256) : 65535 * 4;
  dispatch_float_type(dtype, [&](auto type) {
    using T = decltype(type);
    fill_kernel<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(t), n, seed, lo, hi);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
