#include "kernels/cuda/common.cuh"
#include "kernels/cuda/glu.cuh"

namespace minfer::cuda {

namespace {
__global__ void glu_kernel(float* out, int64_t ld_out, const float* gate, int64_t ld_gate, int64_t gate_step,
                           const float* up, int64_t ld_up, int64_t M, int64_t F, GluActivation activation) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * F; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / F, f = i % F;
    const float g = gate[m * ld_gate + f * gate_step];
    const float act = activation == GluActivation::silu      ? g / (1.0f + expf(-g))
                      : activation == GluActivation::sigmoid ? 1.0f / (1.0f + expf(-g))
                                                             : 0.5f * g * (1.0f + tanhf(0.7978845608f * (g + 0.044715f * g * g * g)));
    out[m * ld_out + f] = act * up[m * ld_up + f];
  }
}
}  // namespace

void glu(cudaStream_t stream, float* out, int64_t ld_out, const float* gate, int64_t ld_gate, int64_t gate_step,
         const float* up, int64_t ld_up, int64_t M, int64_t F, GluActivation activation) {
  if (M * F == 0) return;
  const unsigned blocks = blocks_for(M * F, 256) < 65535 ? blocks_for(M * F, 256) : 65535;
  glu_kernel<<<blocks, 256, 0, stream>>>(out, ld_out, gate, ld_gate, gate_step, up, ld_up, M, F, activation);
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
