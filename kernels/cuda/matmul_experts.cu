#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/matmul_experts.cuh"
#include "kernels/cuda/matvec.cuh"

namespace minfer::cuda {

namespace {

// Slot s's expert, or -1 where its id names none.
__device__ __forceinline__ int32_t expert_of(const int32_t* ids, int64_t s, int64_t slots, int64_t E) {
  if (s >= slots) return -1;
  const int32_t e = ids[s];
  return e >= 0 && e < E ? e : -1;
}

// One warp. __match_any_sync finds the lanes of a step of 32 slots that share an expert; the lowest
// of them adds their count, and each lane's rank among them is the number of lower lanes. Then
// lane 0 turns the counts into first rows and lists the experts with rows (used, n_used). Nothing
// depends on the order threads run in, so the grouping is the same every call.
// note: two passes of M k / 32 dependent steps each and a serial pass over E, which a decode step's
// few slots make cheap; a prompt's pass of 2048 rows with k = 8 is 512 steps a pass (not measured).
__global__ void group_slots(const int32_t* ids, int64_t slots, int64_t E, int32_t* first, int32_t* cursor,
                            int32_t* row, int32_t* used, int32_t* n_used) {
  const int lane = threadIdx.x;
  for (int64_t e = lane; e <= E; e += kWarpSize) first[e] = 0;
  __syncwarp();
  for (int64_t s0 = 0; s0 < slots; s0 += kWarpSize) {  // first[e + 1] = expert e's slots
    const int32_t e = expert_of(ids, s0 + lane, slots, E);
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    if (e >= 0 && lane == __ffs(peers) - 1) first[e + 1] += __popc(peers);
    __syncwarp();
  }
  if (lane == 0) {
    int32_t n = 0;
    for (int64_t e = 0; e < E; ++e) {
      if (first[e + 1] > 0) used[n++] = int32_t(e);
      first[e + 1] += first[e];
    }
    *n_used = n;
  }
  __syncwarp();
  for (int64_t e = lane; e < E; e += kWarpSize) cursor[e] = first[e];
  __syncwarp();
  for (int64_t s0 = 0; s0 < slots; s0 += kWarpSize) {
    const int64_t s = s0 + lane;
    const int32_t e = expert_of(ids, s, slots, E);
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    if (s < slots) row[s] = e >= 0 ? cursor[e] + __popc(peers & ((1u << lane) - 1u)) : -1;
    __syncwarp();
    if (e >= 0 && lane == __ffs(peers) - 1) cursor[e] += __popc(peers);
    __syncwarp();
  }
}

// xs[row[s], :] = x[s (x_per_slot) or s / k, :] for every placed slot.
__global__ void gather_slot_rows(float* xs, const float* x, int64_t ld_x, bool x_per_slot, const int32_t* row,
                                 int64_t slots, int64_t k, int64_t K) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < slots * K; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t s = i / K, c = i % K;
    if (row[s] >= 0) xs[row[s] * K + c] = x[(x_per_slot ? s : s / k) * ld_x + c];
  }
}

// out[s, :] = ys[row[s], :] for every placed slot.
__global__ void scatter_slot_rows(float* out, int64_t ld_out, const float* ys, const int32_t* row, int64_t slots,
                                  int64_t N) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < slots * N; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t s = i / N, n = i % N;
    if (row[s] >= 0) out[s * ld_out + n] = ys[row[s] * N + n];
  }
}

// out[m, n] = sum over j, in order, of weights[m, j] * ys[row[m k + j], n], placed slots only.
__global__ void weighted_slot_sum(float* out, int64_t ld_out, const float* ys, const int32_t* row,
                                  const float* weights, int64_t M, int64_t k, int64_t N) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * N; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / N, n = i % N;
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t r = row[m * k + j];
      if (r >= 0) acc += weights[m * k + j] * ys[r * N + n];
    }
    out[m * ld_out + n] = acc;
  }
}

unsigned grid_for(int64_t n) { return blocks_for(n, 256) < 65535 ? blocks_for(n, 256) : 65535; }

}  // namespace

int64_t matmul_experts_scratch_floats(int64_t M, int64_t k, int64_t E, int64_t N, int64_t K) {
  const int64_t slots = M * k;
  return slots * K + slots * N + (E + 1) + E + slots + E + 1;
}

void matmul_experts(cudaStream_t stream, float* out, int64_t ld_out, const float* x, int64_t ld_x, bool x_per_slot,
                    const void* w, DType w_dtype, const int32_t* ids, const float* weights, float* scratch,
                    int64_t M, int64_t k, int64_t E, int64_t N, int64_t K) {
  const int64_t slots = M * k;
  MINFER_CHECK(slots < INT32_MAX && E < INT32_MAX, "matmul_experts: ", slots, " slots of ", E,
               " experts do not fit the int32 grouping");
  // A grid row per expert used: no more than the experts, nor than the slots.
  const int64_t max_used = std::min(E, slots);
  MINFER_CHECK(max_used <= 65535, "matmul_experts: ", max_used, " experts a step, more than a grid's 65535 rows");
  if (slots == 0 || N == 0) return;
  float* xs = scratch;
  float* ys = xs + slots * K;
  auto* first = reinterpret_cast<int32_t*>(ys + slots * N);
  int32_t* cursor = first + E + 1;
  int32_t* row = cursor + E;
  int32_t* used = row + slots;
  int32_t* n_used = used + E;
  group_slots<<<1, kWarpSize, 0, stream>>>(ids, slots, E, first, cursor, row, used, n_used);
  CUDA_CHECK_LAUNCH();
  if (K > 0) {
    gather_slot_rows<<<grid_for(slots * K), 256, 0, stream>>>(xs, x, ld_x, x_per_slot, row, slots, k, K);
    CUDA_CHECK_LAUNCH();
  }
  // Chunks of up to M rows: a router gives a row k distinct experts, so an expert has at most M rows
  // (any count is right: a group of more rows takes more chunks).
  matvec_experts(stream, ys, N, xs, K, w, w_dtype, first, used, n_used, M, max_used, N, K);
  if (weights == nullptr) {
    scatter_slot_rows<<<grid_for(slots * N), 256, 0, stream>>>(out, ld_out, ys, row, slots, N);
  } else {
    weighted_slot_sum<<<grid_for(M * N), 256, 0, stream>>>(out, ld_out, ys, row, weights, M, k, N);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
