#include "core/quants_blocks.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/matvec.cuh"

#include <type_traits>

namespace minfer::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int64_t kMaxGridRows = 65535;  // a grid's y dimension: the most grid rows matvec_experts takes

// The expert product's groups (matvec_experts): row y of the grid multiplies expert used[y]'s
// matrix by its rows, [first[e], first[e + 1]) of x and out, which hold the rows in expert order
// (matmul_experts.cu groups them); rows y past *n_used return at once. first null: the plain
// product, one grid row of exactly MR rows.
struct ExpertGroups {
  const int32_t* first = nullptr;   // (E + 1), on the device
  const int32_t* used = nullptr;    // (E): the experts with rows, in increasing order, on the device
  const int32_t* n_used = nullptr;  // (1): how many, on the device
  int64_t expert_bytes = 0;         // one expert's matrix
};

// Moves out, x and w to this block's expert and returns its rows (MR without groups; 0 for a grid
// row past the experts used).
template <int MR, class T>
__device__ __forceinline__ int64_t rows_of_group(const ExpertGroups& g, float*& out, int64_t ld_out, const float*& x,
                                                 int64_t ld_x, const T*& w) {
  if (g.first == nullptr) return MR;
  if (int32_t(blockIdx.y) >= *g.n_used) return 0;
  const int32_t e = g.used[blockIdx.y];
  const int64_t r0 = g.first[e];
  w = reinterpret_cast<const T*>(reinterpret_cast<const char*>(w) + e * g.expert_bytes);
  x += r0 * ld_x;
  out += r0 * ld_out;
  return g.first[e + 1] - r0;
}

// Row m of a chunk of `rows` <= MR: the rows past the chunk's last read its last (their sums are
// not written), so every unrolled row loads from a row that exists.
__device__ __forceinline__ const float* chunk_row(const float* x, int64_t ld_x, int m, int rows) {
  return x + (m < rows ? m : rows - 1) * ld_x;
}

// The warp's sums of a chunk's rows, each written by lane 0 where the row exists.
template <int MR>
__device__ __forceinline__ void write_sums(float* out, int64_t ld_out, int64_t n, const float (&acc)[MR], int rows) {
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int m = 0; m < MR; ++m) {
    const float s = warp_sum(acc[m]);
    if (lane == 0 && m < rows) out[m * ld_out + n] = s;
  }
}

// One chunk of `rows` <= M rows: multiply(acc, x, rows) adds this lane's part of each row's sum.
template <int M, class Multiply>
__device__ __forceinline__ void product_chunk(float* out, int64_t ld_out, const float* x, int64_t n, int rows,
                                              Multiply& multiply) {
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  multiply(acc, x, rows);
  write_sums<M>(out, ld_out, n, acc, rows);
}

// Rows [0, rows) of x times weight row n into column n of out, MR rows a chunk. A chunk of one row
// takes the one-row body: at small batches most chosen experts have one row.
template <int MR, class Multiply>
__device__ __forceinline__ void product_rows(float* out, int64_t ld_out, const float* x, int64_t ld_x, int64_t n,
                                             int64_t rows, Multiply multiply) {
  for (int64_t r = 0; r < rows; r += MR) {
    const int chunk = rows - r < MR ? int(rows - r) : MR;
    if (chunk == 1)
      product_chunk<1>(out + r * ld_out, ld_out, x + r * ld_x, n, chunk, multiply);
    else
      product_chunk<MR>(out + r * ld_out, ld_out, x + r * ld_x, n, chunk, multiply);
  }
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

// One weight row n times a chunk of `rows` <= MR rows of x, by one warp: acc[m] is this lane's part.
// kVector: w's rows and x's rows are 16-byte aligned with K a multiple of 8, so 8-wide loads are legal.
template <class T, bool kVector, int MR>
__device__ __forceinline__ void float_row_chunk(float (&acc)[MR], const float* x, int64_t ld_x, const T* row,
                                                int64_t K, int rows) {
  const int lane = threadIdx.x % kWarpSize;
  if constexpr (kVector) {
    for (int64_t k = 8 * lane; k < K; k += 8 * kWarpSize) {
      float wv[8];
      load8<T>(wv, row + k);
#pragma unroll
      for (int m = 0; m < MR; ++m) {
        float xv[8];
        load8<float>(xv, chunk_row(x, ld_x, m, rows) + k);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[m] += wv[i] * xv[i];
      }
    }
  } else {
    for (int64_t k = lane; k < K; k += kWarpSize) {
      const float wv = to_float(row[k]);
#pragma unroll
      for (int m = 0; m < MR; ++m) acc[m] += wv * chunk_row(x, ld_x, m, rows)[k];
    }
  }
}

template <class T, int MR, bool kVector>
__global__ void matvec_kernel(float* out, int64_t ld_out, const float* x, int64_t ld_x, const T* w, int64_t N,
                              int64_t K, ExpertGroups groups) {
  const int64_t rows = rows_of_group<MR>(groups, out, ld_out, x, ld_x, w);
  const int64_t n = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / kWarpSize;
  if (n >= N) return;
  product_rows<MR>(out, ld_out, x, ld_x, n, rows, [&](auto& acc, const float* xc, int chunk) {
    float_row_chunk<T, kVector>(acc, xc, ld_x, w + n * K, K, chunk);
  });
}

// Q8_0 weights (34-byte blocks, so only 2-byte aligned): eight lanes share a block, each taking
// four of its int8 weights with two 2-byte loads, so a warp-wide load covers four neighbouring
// blocks (136 contiguous bytes) and the loop's unrolled iterations keep several in flight.
template <int MR>
__device__ __forceinline__ void q8_0_row_chunk(float (&acc)[MR], const float* x, int64_t ld_x, const BlockQ8* row,
                                               int64_t nb, int rows) {
  const int lane = threadIdx.x % kWarpSize;
  const int part = lane % 8;  // weights 4*part .. 4*part+3 of the block
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
      const float* xm = chunk_row(x, ld_x, m, rows) + k;
      acc[m] += w0 * xm[0] + w1 * xm[1] + w2 * xm[2] + w3 * xm[3];
    }
  }
}

template <int MR>
__global__ void matvec_q8_0_kernel(float* out, int64_t ld_out, const float* x, int64_t ld_x, const BlockQ8* w,
                                   int64_t N, int64_t K, ExpertGroups groups) {
  const int64_t rows = rows_of_group<MR>(groups, out, ld_out, x, ld_x, w);
  const int64_t n = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / kWarpSize;
  if (n >= N) return;
  const int64_t nb = K / 32;
  product_rows<MR>(out, ld_out, x, ld_x, n, rows, [&](auto& acc, const float* xc, int chunk) {
    q8_0_row_chunk(acc, xc, ld_x, w + n * nb, nb, chunk);
  });
}

// Q4_0 .. Q6_K: each lane owns one group of 8 weights of a block (core/quants_blocks.h), so a
// legacy block of 32 takes 4 lanes and a warp-wide step covers 8 neighbouring blocks (144 to 192
// contiguous bytes), while a K-quant super-block of 256 takes the whole warp. A lane reads only
// its group's bytes (single-byte loads, as blocks of 18 .. 210 bytes have no wider alignment) and
// its sub-block's scale, dequantizes the 8 weights in registers exactly as the host does, and
// multiplies them with 8 consecutive activations of each of the chunk's rows.
template <class Block, int MR>
__device__ __forceinline__ void blocks_row_chunk(float (&acc)[MR], const float* x, int64_t ld_x, const Block* row,
                                                 int64_t nb, int rows) {
  constexpr int kWeights = blocks::Traits<Block>::kWeights;
  constexpr int kGroups = kWeights / 8;                // lanes per block
  constexpr int kBlocksPerStep = kWarpSize / kGroups;  // blocks per warp-wide step
  const int lane = threadIdx.x % kWarpSize;
  const int g = lane % kGroups;
#pragma unroll 2
  for (int64_t b = lane / kGroups; b < nb; b += kBlocksPerStep) {
    float wv[8];
    blocks::dequantize8(row[b], g, wv);
    const int64_t k = b * kWeights + 8 * g;
#pragma unroll
    for (int m = 0; m < MR; ++m) {
      const float* xm = chunk_row(x, ld_x, m, rows) + k;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[m] += wv[i] * xm[i];
    }
  }
}

template <class Block, int MR>
__global__ void matvec_blocks_kernel(float* out, int64_t ld_out, const float* x, int64_t ld_x, const Block* w,
                                     int64_t N, int64_t K, ExpertGroups groups) {
  const int64_t rows = rows_of_group<MR>(groups, out, ld_out, x, ld_x, w);
  const int64_t n = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / kWarpSize;
  if (n >= N) return;
  const int64_t nb = K / blocks::Traits<Block>::kWeights;
  product_rows<MR>(out, ld_out, x, ld_x, n, rows, [&](auto& acc, const float* xc, int chunk) {
    blocks_row_chunk<Block>(acc, xc, ld_x, w + n * nb, nb, chunk);
  });
}

// A grid of N / 8 blocks a row, and `grid_rows` rows (one without groups).
dim3 grid_of(int64_t N, const ExpertGroups& groups, int64_t grid_rows) {
  return dim3(blocks_for(N, kWarpsPerBlock), groups.first ? unsigned(grid_rows) : 1u);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Calls f with the chunk size MR for `rows` rows as a compile-time constant: rows itself up to
// kMatvecMaxRows, and kMatvecMaxRows beyond.
template <class F>
void dispatch_rows(int64_t rows, F&& f) {
  static_assert(kMatvecMaxRows == 8, "the cases below are 1 .. kMatvecMaxRows");
  switch (rows) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    default: f(std::integral_constant<int, 8>{}); break;
  }
}

// The kernel for w's type, in chunks of MR rows (`rows` picks MR), on a grid of one row or, with
// groups, `grid_rows` rows.
void launch(cudaStream_t stream, float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w,
            DType w_dtype, int64_t rows, int64_t N, int64_t K, bool vector, const ExpertGroups& groups,
            int64_t grid_rows) {
  const dim3 grid = grid_of(N, groups, grid_rows);
  const unsigned threads = kWarpsPerBlock * kWarpSize;
  dispatch_rows(rows, [&](auto mr) {
    constexpr int MR = decltype(mr)::value;
    if (w_dtype == DType::q8_0) {
      matvec_q8_0_kernel<MR><<<grid, threads, 0, stream>>>(out, ld_out, x, ld_x, static_cast<const BlockQ8*>(w), N,
                                                           K, groups);
    } else if (is_quantized(w_dtype)) {
      blocks::dispatch_block(w_dtype, [&](auto tag) {
        using Block = typename decltype(tag)::type;
        matvec_blocks_kernel<Block, MR>
            <<<grid, threads, 0, stream>>>(out, ld_out, x, ld_x, static_cast<const Block*>(w), N, K, groups);
      });
    } else {
      dispatch_float_type(w_dtype, [&](auto type) {
        using T = decltype(type);
        const T* weights = static_cast<const T*>(w);
        if (vector)
          matvec_kernel<T, MR, true><<<grid, threads, 0, stream>>>(out, ld_out, x, ld_x, weights, N, K, groups);
        else
          matvec_kernel<T, MR, false><<<grid, threads, 0, stream>>>(out, ld_out, x, ld_x, weights, N, K, groups);
      });
    }
  });
  CUDA_CHECK_LAUNCH();
}

void check_whole_blocks(const char* op, DType w_dtype, int64_t K) {
  MINFER_CHECK(!is_quantized(w_dtype) || K % dtype_block(w_dtype) == 0, op, ": ", dtype_name(w_dtype), " rows of ",
               K, " weights are not whole blocks");
}

}  // namespace

void matvec(cudaStream_t stream, float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w,
            DType w_dtype, int64_t M, int64_t N, int64_t K) {
  MINFER_CHECK(M >= 1 && M <= kMatvecMaxRows, "matvec takes 1 to ", kMatvecMaxRows, " rows, got ", M);
  check_whole_blocks("matvec", w_dtype, K);
  if (N == 0) return;
  const bool vector = K % 8 == 0 && ld_x % 4 == 0 && aligned16(x) && aligned16(w);
  launch(stream, out, ld_out, x, ld_x, w, w_dtype, M, N, K, vector, ExpertGroups{}, 1);
}

void matvec_experts(cudaStream_t stream, float* out, int64_t ld_out, const float* x, int64_t ld_x, const void* w,
                    DType w_dtype, const int32_t* first, const int32_t* used, const int32_t* n_used,
                    int64_t chunk_rows, int64_t max_used, int64_t N, int64_t K) {
  check_whole_blocks("matvec_experts", w_dtype, K);
  MINFER_CHECK(max_used >= 0 && max_used <= kMaxGridRows, "matvec_experts: ", max_used,
               " experts, more than a grid's ", kMaxGridRows, " rows");
  if (N == 0 || max_used == 0 || chunk_rows == 0) return;
  const auto expert_bytes = static_cast<int64_t>(dtype_bytes(w_dtype, uint64_t(N) * uint64_t(K)));
  const bool vector = K % 8 == 0 && ld_x % 4 == 0 && aligned16(x) && aligned16(w) && expert_bytes % 16 == 0;
  launch(stream, out, ld_out, x, ld_x, w, w_dtype, chunk_rows, N, K, vector,
         ExpertGroups{first, used, n_used, expert_bytes}, max_used);
}

}  // namespace minfer::cuda
