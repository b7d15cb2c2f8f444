#include "kernels/cuda/add.cuh"
#include "kernels/cuda/common.cuh"

namespace minfer::cuda {

namespace {
// One thread per element, grid-stride; the row/column split keeps row strides general.
__global__ void add_kernel(float* out, int64_t ld_out, const float* a, int64_t ld_a, const float* b, int64_t ld_b,
                           int64_t M, int64_t D) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * D; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / D, d = i % D;
    out[m * ld_out + d] = a[m * ld_a + d] + b[m * ld_b + d];
  }
}
}  // namespace

void add(cudaStream_t stream, float* out, int64_t ld_out, const float* a, int64_t ld_a, const float* b,
         int64_t ld_b, int64_t M, int64_t D) {
  if (M * D == 0) return;
  const unsigned blocks = blocks_for(M * D, 256) < 65535 ? blocks_for(M * D, 256) : 65535;
  add_kernel<<<blocks, 256, 0, stream>>>(out, ld_out, a, ld_a, b, ld_b, M, D);
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
