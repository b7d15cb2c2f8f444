#include "kernels/cuda/common.cuh"
#include "kernels/cuda/matmul_experts.cuh"
#include "kernels/cuda/matvec.cuh"

namespace minfer::cuda {

namespace {

// out[m, n] = sum over j, in order, of weights[m, j] * y[m k + j, n].
__global__ void weighted_slot_sum(float* out, int64_t ld_out, const float* y, const float* weights, int64_t M,
                                  int64_t k, int64_t N) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * N; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / N, n = i % N;
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j) acc += weights[m * k + j] * y[(m * k + j) * N + n];
    out[m * ld_out + n] = acc;
  }
}

}  // namespace

void matmul_experts(cudaStream_t stream, float* out, int64_t ld_out, const float* x, int64_t ld_x, bool x_per_slot,
                    const void* w, DType w_dtype, const int32_t* ids, const float* weights, float* slot_rows,
                    int64_t M, int64_t k, int64_t E, int64_t N, int64_t K) {
  if (weights == nullptr) {
    matvec_experts(stream, out, ld_out, x, ld_x, x_per_slot, w, w_dtype, ids, M * k, k, E, N, K);
    return;
  }
  matvec_experts(stream, slot_rows, N, x, ld_x, x_per_slot, w, w_dtype, ids, M * k, k, E, N, K);
  if (M * N == 0) return;
  const unsigned blocks = blocks_for(M * N, 256) < 65535 ? blocks_for(M * N, 256) : 65535;
  weighted_slot_sum<<<blocks, 256, 0, stream>>>(out, ld_out, slot_rows, weights, M, k, N);
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
