#include <mma.h>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_prefill.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/ref/kv_store.h"

namespace minfer::cuda {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kRows = kPrefillTileRows;  // query rows per block
constexpr int kKeys = 64;    // keys per tile
constexpr int kWarps = 4;    // warp w owns rows 16 w .. 16 w + 15
constexpr int kThreads = kWarps * kWarpSize;

// Shared memory of the Tensor Core path, in elements; every row is padded (ldm) so that WMMA
// pointers stay 32-byte aligned and rows do not all start on the same bank.
template <int D>
struct Layout {
  static constexpr int ld_qkv = D + 8;     // halves
  static constexpr int ld_s = kKeys + 4;   // floats
  static constexpr int ld_p = kKeys + 8;   // halves
  static constexpr int ld_o = D + 4;       // floats
  static constexpr size_t q = 0;
  static constexpr size_t k = q + size_t(kRows) * ld_qkv * 2;
  static constexpr size_t v = k + size_t(kKeys) * ld_qkv * 2;
  static constexpr size_t s = v + size_t(kKeys) * ld_qkv * 2;
  static constexpr size_t p = s + size_t(kRows) * ld_s * 4;
  static constexpr size_t o = p + size_t(kRows) * ld_p * 2;
  static constexpr size_t stats = o + size_t(kRows) * ld_o * 4;  // softmax state, correction per row
  static constexpr size_t bytes = stats + size_t(kRows) * (sizeof(OnlineSoftmax) + 4);
};

// The block's shared memory, carved as Layout<D> says.
template <class T, int D>
struct Tiles {
  T* q;            // (kRows, D): the block's queries, scaled by the score scale
  T* k;            // (kKeys, D): this tile's keys
  T* v;            // (kKeys, D): this tile's values
  float* s;        // (kRows, kKeys): scores
  T* p;            // (kRows, kKeys): probabilities, unnormalised
  float* o;        // (kRows, D): the output so far
  OnlineSoftmax* row_softmax;  // (kRows): running max and sum of exp(score - max)
  float* row_corr;             // (kRows): this tile's rescaling of o
  __device__ explicit Tiles(unsigned char* smem)
      : q(reinterpret_cast<T*>(smem + Layout<D>::q)), k(reinterpret_cast<T*>(smem + Layout<D>::k)),
        v(reinterpret_cast<T*>(smem + Layout<D>::v)), s(reinterpret_cast<float*>(smem + Layout<D>::s)),
        p(reinterpret_cast<T*>(smem + Layout<D>::p)), o(reinterpret_cast<float*>(smem + Layout<D>::o)),
        row_softmax(reinterpret_cast<OnlineSoftmax*>(smem + Layout<D>::stats)),
        row_corr(reinterpret_cast<float*>(row_softmax + kRows)) {}
};

// Q (rows of the block, scaled; padding rows zero), O = 0, and the softmax state of every row.
template <class T, int D>
__device__ __forceinline__ void load_query_tile(const Tiles<T, D>& tl, const AttentionArgs& a, int64_t m0,
                                                int64_t rows, int64_t h, float scale) {
  using L = Layout<D>;
  for (int i = threadIdx.x; i < kRows * D; i += kThreads) {
    const int r = i / D, d = i % D;
    const float value = r < rows ? a.q[(m0 + r) * a.ld_q + h * D + d] * scale : 0.0f;
    tl.q[r * L::ld_qkv + d] = from_float<T>(value);
    tl.o[r * L::ld_o + d] = 0.0f;
  }
  for (int r = threadIdx.x; r < kRows; r += kThreads) tl.row_softmax[r] = OnlineSoftmax();
}

// Keys and values tile * kKeys .. tile * kKeys + kKeys - 1. note: a tile's 64 keys may lie in
// several blocks of the cache, so each key row is found through the block table, once per tile
// (row_offset, shared); keys outside first_key .. last_key (before the first row's window, or past
// the last row) are zeros, masked later, and never looked up.
template <class T, int D>
__device__ __forceinline__ void load_key_value_tile(const Tiles<T, D>& tl, const HeadRows<T>& rows, int64_t* row_offset,
                                                    int64_t tile, int64_t first_key, int64_t last_key) {
  using L = Layout<D>;
  for (int r = threadIdx.x; r < kKeys; r += kThreads) {
    const int64_t t = tile * kKeys + r;
    row_offset[r] = t >= first_key && t <= last_key ? rows.offset(t) : -1;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kKeys * D; i += kThreads) {
    const int r = i / D, d = i % D;
    const int64_t at = row_offset[r];
    const T zero = from_float<T>(0.0f);
    tl.k[r * L::ld_qkv + d] = at >= 0 ? rows.keys[at + d] : zero;
    tl.v[r * L::ld_qkv + d] = at >= 0 ? rows.values[at + d] : zero;
  }
}

// S (this warp's 16 rows x 64 keys) = Q K^T on Tensor Cores. K is stored (key, d), which read
// column-major is the (d, key) matrix B the product needs.
template <class T, int D>
__device__ __forceinline__ void scores_on_tensor_cores(const Tiles<T, D>& tl, int warp) {
  using L = Layout<D>;
  for (int c = 0; c < kKeys / 16; ++c) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> s_frag;
    wmma::fill_fragment(s_frag, 0.0f);
    for (int kk = 0; kk < D; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> q_frag;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> k_frag;
      wmma::load_matrix_sync(q_frag, tl.q + (16 * warp) * L::ld_qkv + kk, L::ld_qkv);
      wmma::load_matrix_sync(k_frag, tl.k + (16 * c) * L::ld_qkv + kk, L::ld_qkv);
      wmma::mma_sync(s_frag, q_frag, k_frag, s_frag);
    }
    wmma::store_matrix_sync(tl.s + (16 * warp) * L::ld_s + 16 * c, s_frag, L::ld_s, wmma::mem_row_major);
  }
}

// The causal mask (and the window's, keys t > query_pos - window) and the online softmax update,
// one of this warp's rows at a time (lane covers keys lane and lane + 32): P = exp(S - new max),
// the running sum and max, and O rescaled by exp(old max - new max).
template <class T, int D>
__device__ __forceinline__ void mask_and_softmax(const Tiles<T, D>& tl, int warp, int lane, int64_t tile,
                                                 int64_t pos0, int64_t rows, int64_t window) {
  using L = Layout<D>;
  for (int rr = 0; rr < 16; ++rr) {
    const int r = 16 * warp + rr;
    const int64_t query_pos = pos0 + r;
    float s[2];
    for (int u = 0; u < 2; ++u) {
      const int c = lane + kWarpSize * u;
      const int64_t t = tile * kKeys + c;
      const bool seen = t <= query_pos && t >= attention_first_key(query_pos, window);
      s[u] = (r < rows && seen) ? tl.s[r * L::ld_s + c] : -INFINITY;
    }
    // Every lane updates its copy of the row's state alike; lane 0 stores it. A row with no key
    // yet (or a padding row) keeps max -inf, weights 0 and an empty output.
    OnlineSoftmax state = tl.row_softmax[r];
    const float correction = state.raise_max(warp_max(fmaxf(s[0], s[1])));
    const float p[2] = {softmax_rescale(s[0], state.max), softmax_rescale(s[1], state.max)};
    state.sum += warp_sum(p[0] + p[1]);
    for (int u = 0; u < 2; ++u) tl.p[r * L::ld_p + lane + kWarpSize * u] = from_float<T>(p[u]);
    if (lane == 0) {
      tl.row_softmax[r] = state;
      tl.row_corr[r] = correction;
    }
  }
  __syncwarp();
  for (int rr = 0; rr < 16; ++rr) {
    const int r = 16 * warp + rr;
    for (int d = lane; d < D; d += kWarpSize) tl.o[r * L::ld_o + d] *= tl.row_corr[r];
  }
}

// O (this warp's 16 rows x D) += P (16 x 64 keys) V (64 keys x D) on Tensor Cores.
template <class T, int D>
__device__ __forceinline__ void accumulate_on_tensor_cores(const Tiles<T, D>& tl, int warp) {
  using L = Layout<D>;
  for (int c = 0; c < D / 16; ++c) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> o_frag;
    wmma::load_matrix_sync(o_frag, tl.o + (16 * warp) * L::ld_o + 16 * c, L::ld_o, wmma::mem_row_major);
    for (int kk = 0; kk < kKeys; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> p_frag;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> v_frag;
      wmma::load_matrix_sync(p_frag, tl.p + (16 * warp) * L::ld_p + kk, L::ld_p);
      wmma::load_matrix_sync(v_frag, tl.v + kk * L::ld_qkv + 16 * c, L::ld_qkv);
      wmma::mma_sync(o_frag, p_frag, v_frag, o_frag);
    }
    wmma::store_matrix_sync(tl.o + (16 * warp) * L::ld_o + 16 * c, o_frag, L::ld_o, wmma::mem_row_major);
  }
}

// T is __half or __nv_bfloat16: the cache's type and the Tensor Cores' input type. The steps of
// the header's essay: load Q; for each tile of 64 keys, load K and V, S = Q K^T, mask and
// softmax, O += P V; then O / sum.
template <class T, int D>
__global__ void prefill_tensor_core_kernel(AttentionArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  const Tiles<T, D> tl(smem);
  const int64_t m0 = blockIdx.x * int64_t(kRows), h = blockIdx.y;
  const int64_t rows = min(int64_t(kRows), a.M - m0);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;

  // Rows that are not one prompt's consecutive positions are flash-decoding's, in the same step.
  if (!tile_is_one_prompt(a, m0)) return;
  const int64_t pos0 = a.pos[m0];

  __shared__ int64_t row_offset[kKeys];
  const HeadRows<T> head = head_rows<T>(a, m0, h);
  const int64_t first_key = attention_first_key(pos0, a.window), last_key = pos0 + rows - 1;
  load_query_tile(tl, a, m0, rows, h, a.scale);
  // Tiles before the first row's window hold no key any row sees.
  for (int64_t tile = first_key / kKeys; tile * kKeys <= last_key; ++tile) {
    __syncthreads();  // the previous tile's K and V are no longer read
    load_key_value_tile(tl, head, row_offset, tile, first_key, last_key);
    __syncthreads();
    scores_on_tensor_cores(tl, warp);
    __syncwarp();
    mask_and_softmax(tl, warp, lane, tile, pos0, rows, a.window);
    __syncwarp();
    accumulate_on_tensor_cores(tl, warp);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < rows * D; i += kThreads) {
    const int r = i / D, d = i % D;
    a.out[(m0 + r) * a.ld_out + h * D + d] = tl.o[r * Layout<D>::ld_o + d] / tl.row_softmax[r].sum;
  }
}

template <class T, int D>
void launch_tensor_cores(cudaStream_t stream, const AttentionArgs& a, dim3 grid) {
  auto kernel = prefill_tensor_core_kernel<T, D>;
  constexpr size_t bytes = Layout<D>::bytes;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  kernel<<<grid, kThreads, bytes, stream>>>(a);
}

}  // namespace

void attention_prefill_tiles(cudaStream_t stream, const AttentionArgs& a) {
  if (a.M == 0) return;
  const dim3 grid(static_cast<unsigned>((a.M + kRows - 1) / kRows), static_cast<unsigned>(a.n_heads));
  // note: the cases of attention_prefill_on_tensor_cores (engine/cuda_choices.h), which chooses this kernel.
  if (a.cache_dtype == DType::f16 && a.head_dim == 64) launch_tensor_cores<__half, 64>(stream, a, grid);
  else if (a.cache_dtype == DType::f16 && a.head_dim == 128) launch_tensor_cores<__half, 128>(stream, a, grid);
  else if (a.cache_dtype == DType::bf16 && a.head_dim == 64) launch_tensor_cores<__nv_bfloat16, 64>(stream, a, grid);
  else if (a.cache_dtype == DType::bf16 && a.head_dim == 128) launch_tensor_cores<__nv_bfloat16, 128>(stream, a, grid);
  else
    fail("the prefill tiles take f16 or bf16 caches with heads of 64 or 128, not ", dtype_name(a.cache_dtype),
         " and ", a.head_dim);
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
