#include "core/quants_blocks.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/matvec.cuh"

#include <algorithm>

namespace minfer::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

// The expert product's slots (matvec_experts): row y of the grid is slot first + y, which
// multiplies expert ids[slot]'s matrix by x's row slot (x_per_slot) or slot / k into out's row
// slot. ids null: the plain product, one grid row.
struct Slots {
  const int32_t* ids = nullptr;
  int64_t first = 0, k = 1, experts = 0, expert_bytes = 0;
  bool x_per_slot = false;
};

// Moves out, x and w to this block's slot; an id outside [0, experts) leaves its row unwritten
// (the host cannot read ids on the device without a synchronisation).
template <class T>
__device__ __forceinline__ bool at_slot(const Slots& s, float*& out, int64_t ld_out, const float*& x, int64_t ld_x,
                                        const T*& w) {
  if (s.ids == nullptr) return true;
  const int64_t slot = s.first + blockIdx.y;
  const int32_t e = s.ids[slot];
  if (e < 0 || e >= s.experts) return false;
  w = reinterpret_cast<const T*>(reinterpret_cast<const char*>(w) + e * s.expert_bytes);
  x += (s.x_per_slot ? slot : slot / s.k) * ld_x;
  out += slot * ld_out;
  return true;
}

// Eight weights as floats from one 16-byte (f16/bf16) or two 16-byte (f32) loads.
template <class T>
__device__ __forceinline__ void load8(float (&v)[8], const T* p);
template <>
__device__ __forceinline__ void load8<float>(float (&v)[8], const float* p) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
  v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
template <>
__device__ __forceinline__ void load8<__half>(float (&v)[8], const __half* p) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}
template <>
__device__ __forceinline__ void load8<__nv_bfloat16>(float (&v)[8], const __nv_bfloat16* p) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}

// kVector: rows and x are 16-byte aligned with K a multiple of 8, so 8-wide loads are legal.
template <class T, int MR, bool kVector>
__global__ void matvec_kernel(float* out, int64_t ld_out, const float* x, int64_t ld_x, const T* w, int64_t N,
                              int64_t K, Slots slots) {
  if (!at_slot(slots, out, ld_out, x, ld_x, w)) return;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t n = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / kWarpSize;
  if (n >= N) return;
  const T* row = w + n * K;
  float acc[MR];
#pragma unroll
  for (int m = 0; m < MR; ++m) acc[m] = 0.0f;
  if constexpr (kVector) {
    for (int64_t k = 8 * lane; k < K; k += 8 * kWarpSize) {
      float wv[8];
      load8<T>(wv, row + k);
#pragma unroll
      for (int m = 0; m < MR; ++m) {
        float xv[8];
        load8<float>(xv, x + m * ld_x + k);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[m] += wv[i] * xv[i];
      }
    }
  } else {
    for (int64_t k = lane; k < K; k += kWarpSize) {
      const float wv = to_float(row[k]);
#pragma unroll
      for (int m = 0; m < MR; ++m) acc[m] += wv * x[m * ld_x + k];
    }
  }
#pragma unroll
  for (int m = 0; m < MR; ++m) {
    const float s = warp_sum(acc[m]);
    if (lane == 0) out[m * ld_out + n] = s;
  }
}

// Q8_0 weights (34-byte blocks, so only 2-byte aligned): eight lanes share a block, each taking
// four of its int8 weights with two 2-byte loads, so a warp-wide load covers four neighbouring
// blocks (136 contiguous bytes) and the loop's unrolled iterations keep several in flight.
template <int MR>
__global__ void matvec_q8_0_kernel(float* out, int64_t ld_out, const float* x, int64_t ld_x, const BlockQ8* w,
                                   int64_t N, int64_t K, Slots slots) {
  if (!at_slot(slots, out, ld_out, x, ld_x, w)) return;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t n = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / kWarpSize;
  if (n >= N) return;
  const int64_t nb = K / 32;
  const BlockQ8* row = w + n * nb;
  const int part = lane % 8;  // weights 4*part .. 4*part+3 of the block
  float acc[MR];
#pragma unroll
  for (int m = 0; m < MR; ++m) acc[m] = 0.0f;
#pragma unroll 4
  for (int64_t b = lane / 8; b < nb; b += kWarpSize / 8) {
    const BlockQ8* block = row + b;
    const float d = __half2float(__ushort_as_half(block->d));
    const uint16_t* q16 = reinterpret_cast<const uint16_t*>(block->q) + 2 * part;
    const uint16_t lo = q16[0], hi = q16[1];
    const float w0 = d * static_cast<int8_t>(lo & 0xff), w1 = d * static_cast<int8_t>(lo >> 8);
    const float w2 = d * static_cast<int8_t>(hi & 0xff), w3 = d * static_cast<int8_t>(hi >> 8);
    const int64_t k = 32 * b + 4 * part;
#pragma unroll
    for (int m = 0; m < MR; ++m) {
      const float* xm = x + m * ld_x + k;
      acc[m] += w0 * xm[0] + w1 * xm[1] + w2 * xm[2] + w3 * xm[3];
    }
  }
#pragma unroll
  for (int m = 0; m < MR; ++m) {
    const float s = warp_sum(acc[m]);
    if (lane == 0) out[m * ld_out + n] = s;
  }
}

// Q4_0 .. Q6_K: each lane owns one group of 8 weights of a block (core/quants_blocks.h), so a
// legacy block of 32 takes 4 lanes and a warp-wide step covers 8 neighbouring blocks (144 to 192
// contiguous bytes), while a K-quant super-block of 256 takes the whole warp. A lane reads only
// its group's bytes (single-byte loads, as blocks of 18 .. 210 bytes have no wider alignment) and
// its sub-block's scale, dequantizes the 8 weights in registers exactly as the host does, and
// multiplies them with 8 consecutive activations of each of the M rows.
template <class Block, int MR>
__global__ void matvec_blocks_kernel(float* out, int64_t ld_out, const float* x, int64_t ld_x, const Block* w,
                                     int64_t N, int64_t K, Slots slots) {
  if (!at_slot(slots, out, ld_out, x, ld_x, w)) return;
  constexpr int kWeights = blocks::Traits<Block>::kWeights;
  constexpr int kGroups = kWeights / 8;                 // lanes per block
  constexpr int kBlocksPerStep = kWarpSize / kGroups;   // blocks per warp-wide step
  const int lane = threadIdx.x % kWarpSize;
  const int64_t n = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / kWarpSize;
  if (n >= N) return;
  const int64_t nb = K / kWeights;
  const Block* row = w + n * nb;
  const int g = lane % kGroups;
  float acc[MR];
#pragma unroll
  for (int m = 0; m < MR; ++m) acc[m] = 0.0f;
#pragma unroll 2
  for (int64_t b = lane / kGroups; b < nb; b += kBlocksPerStep) {
    float wv[8];
    blocks::dequantize8(row[b], g, wv);
    const int64_t k = b * kWeights + 8 * g;
#pragma unroll
    for (int m = 0; m < MR; ++m) {
      const float* xm = x + m * ld_x + k;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[m] += wv[i] * xm[i];
    }
  }
#pragma unroll
  for (int m = 0; m < MR; ++m) {
    const float s = warp_sum(acc[m]);
    if (lane == 0) out[m * ld_out + n] = s;
  }
}

// A grid of N / 8 blocks a row, and a row per slot (one without slots).
dim3 grid_of(int64_t N, const Slots& slots, int64_t slot_count) {
  return dim3(blocks_for(N, kWarpsPerBlock), slots.ids ? unsigned(slot_count) : 1u);
}

template <class Block, int MR>
void launch_blocks(cudaStream_t stream, float* out, int64_t ld_out, const float* x, int64_t ld_x, const Block* w,
                   int64_t N, int64_t K, const Slots& slots = {}, int64_t slot_count = 1) {
  matvec_blocks_kernel<Block, MR><<<grid_of(N, slots, slot_count), kWarpsPerBlock * kWarpSize, 0, stream>>>(
      out, ld_out, x, ld_x, w, N, K, slots);
}

template <int MR>
void launch_q8_0(cudaStream_t stream, float* out, int64_t ld_out, const float* x, int64_t ld_x, const BlockQ8* w,
                 int64_t N, int64_t K, const Slots& slots = {}, int64_t slot_count = 1) {
  matvec_q8_0_kernel<MR><<<grid_of(N, slots, slot_count), kWarpsPerBlock * kWarpSize, 0, stream>>>(
      out, ld_out, x, ld_x, w, N, K, slots);
}

template <class T, int MR>
void launch(cudaStream_t stream, float* out, int64_t ld_out, const float* x, int64_t ld_x, const T* w, int64_t N,
            int64_t K, bool vector, const Slots& slots = {}, int64_t slot_count = 1) {
  const dim3 grid = grid_of(N, slots, slot_count);
  if (vector)
    matvec_kernel<T, MR, true><<<grid, kWarpsPerBlock * kWarpSize, 0, stream>>>(out, ld_out, x, ld_x, w, N, K, slots);
  else
    matvec_kernel<T, MR, false><<<grid, kWarpsPerBlock * kWarpSize, 0, stream>>>(out, ld_out, x, ld_x, w, N, K, slots);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void matvec(cudaStream_t stream, float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w,
            DType w_dtype, int64_t M, int64_t N, int64_t K) {
  MINFER_CHECK(M >= 1 && M <= kMatvecMaxRows, "matvec takes 1 to ", kMatvecMaxRows, " rows, got ", M);
  if (N == 0) return;
  if (w_dtype == DType::q8_0) {
    MINFER_CHECK(K % 32 == 0, "matvec: q8_0 rows of ", K, " weights are not whole blocks");
    const auto* q8 = static_cast<const BlockQ8*>(w);
    switch (M) {
      case 1: launch_q8_0<1>(stream, out, ld_out, x, ld_x, q8, N, K); break;
      case 2: launch_q8_0<2>(stream, out, ld_out, x, ld_x, q8, N, K); break;
      case 3: launch_q8_0<3>(stream, out, ld_out, x, ld_x, q8, N, K); break;
      case 4: launch_q8_0<4>(stream, out, ld_out, x, ld_x, q8, N, K); break;
      case 5: launch_q8_0<5>(stream, out, ld_out, x, ld_x, q8, N, K); break;
      case 6: launch_q8_0<6>(stream, out, ld_out, x, ld_x, q8, N, K); break;
      case 7: launch_q8_0<7>(stream, out, ld_out, x, ld_x, q8, N, K); break;
      default: launch_q8_0<8>(stream, out, ld_out, x, ld_x, q8, N, K); break;
    }
    CUDA_CHECK_LAUNCH();
    return;
  }
  if (is_quantized(w_dtype)) {
    MINFER_CHECK(K % dtype_block(w_dtype) == 0, "matvec: ", dtype_name(w_dtype), " rows of ", K,
                 " weights are not whole blocks");
    blocks::dispatch_block(w_dtype, [&](auto tag) {
      using Block = typename decltype(tag)::type;
      const auto* weights = static_cast<const Block*>(w);
      switch (M) {
        case 1: launch_blocks<Block, 1>(stream, out, ld_out, x, ld_x, weights, N, K); break;
        case 2: launch_blocks<Block, 2>(stream, out, ld_out, x, ld_x, weights, N, K); break;
        case 3: launch_blocks<Block, 3>(stream, out, ld_out, x, ld_x, weights, N, K); break;
        case 4: launch_blocks<Block, 4>(stream, out, ld_out, x, ld_x, weights, N, K); break;
        case 5: launch_blocks<Block, 5>(stream, out, ld_out, x, ld_x, weights, N, K); break;
        case 6: launch_blocks<Block, 6>(stream, out, ld_out, x, ld_x, weights, N, K); break;
        case 7: launch_blocks<Block, 7>(stream, out, ld_out, x, ld_x, weights, N, K); break;
        default: launch_blocks<Block, 8>(stream, out, ld_out, x, ld_x, weights, N, K); break;
      }
    });
    CUDA_CHECK_LAUNCH();
    return;
  }
  const bool vector = K % 8 == 0 && ld_x % 4 == 0 && aligned16(x) && aligned16(w);
  dispatch_float_type(w_dtype, [&](auto type) {
    using T = decltype(type);
    const T* weights = static_cast<const T*>(w);
    switch (M) {
      case 1: launch<T, 1>(stream, out, ld_out, x, ld_x, weights, N, K, vector); break;
      case 2: launch<T, 2>(stream, out, ld_out, x, ld_x, weights, N, K, vector); break;
      case 3: launch<T, 3>(stream, out, ld_out, x, ld_x, weights, N, K, vector); break;
      case 4: launch<T, 4>(stream, out, ld_out, x, ld_x, weights, N, K, vector); break;
      case 5: launch<T, 5>(stream, out, ld_out, x, ld_x, weights, N, K, vector); break;
      case 6: launch<T, 6>(stream, out, ld_out, x, ld_x, weights, N, K, vector); break;
      case 7: launch<T, 7>(stream, out, ld_out, x, ld_x, weights, N, K, vector); break;
      default: launch<T, 8>(stream, out, ld_out, x, ld_x, weights, N, K, vector); break;
    }
  });
  CUDA_CHECK_LAUNCH();
}

void matvec_experts(cudaStream_t stream, float* out, int64_t ld_out, const float* x, int64_t ld_x, bool x_per_slot,
                    const void* w, DType w_dtype, const int32_t* ids, int64_t slots, int64_t k, int64_t E, int64_t N,
                    int64_t K) {
  if (N == 0 || slots == 0) return;
  MINFER_CHECK(!is_quantized(w_dtype) || K % dtype_block(w_dtype) == 0, "matvec_experts: ", dtype_name(w_dtype),
               " rows of ", K, " weights are not whole blocks");
  const auto expert_bytes = static_cast<int64_t>(dtype_bytes(w_dtype, uint64_t(N) * uint64_t(K)));
  // note: a grid has at most 65535 rows, so the slots go in chunks of that many.
  constexpr int64_t kMaxGridRows = 65535;
  const bool vector = K % 8 == 0 && ld_x % 4 == 0 && aligned16(x) && aligned16(w) && expert_bytes % 16 == 0;
  for (int64_t first = 0; first < slots; first += kMaxGridRows) {
    const int64_t count = std::min(kMaxGridRows, slots - first);
    const Slots s{ids, first, k, E, expert_bytes, x_per_slot};
    if (w_dtype == DType::q8_0) {
      launch_q8_0<1>(stream, out, ld_out, x, ld_x, static_cast<const BlockQ8*>(w), N, K, s, count);
    } else if (is_quantized(w_dtype)) {
      blocks::dispatch_block(w_dtype, [&](auto tag) {
        using Block = typename decltype(tag)::type;
        launch_blocks<Block, 1>(stream, out, ld_out, x, ld_x, static_cast<const Block*>(w), N, K, s, count);
      });
    } else {
      dispatch_float_type(w_dtype, [&](auto type) {
        using T = decltype(type);
        launch<T, 1>(stream, out, ld_out, x, ld_x, static_cast<const T*>(w), N, K, vector, s, count);
      });
    }
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace minfer::cuda
