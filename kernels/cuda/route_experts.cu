#include "kernels/cuda/common.cuh"
#include "kernels/cuda/route_experts.cuh"

namespace minfer::cuda {

namespace {

// note: a thread a row and k passes over its E logits: routers are small (E up to a few hundred,
// k up to 8 or so), and the step's matrices, not this, take its time.
__global__ void route_kernel(int32_t* ids, float* weights, const float* logits, int64_t ld_logits, int64_t M,
                             int64_t E, int64_t k, bool normalize) {
  const int64_t m = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (m >= M) return;
  const float* l = logits + m * ld_logits;
  int32_t* id = ids + m * k;
  float* w = weights + m * k;
  // Pass j takes the best logit not yet taken: larger, or equal and of a lower expert, than
  // every later choice is after the one before it.
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i) taken |= id[i] == e;
      if (!taken && (best < 0 || l[e] > l[best])) best = int32_t(e);
    }
    id[j] = best;
  }
  const float top = l[id[0]];
  float all = 0.0f, chosen = 0.0f;
  for (int64_t e = 0; e < E; ++e) all += expf(l[e] - top);
  for (int64_t j = 0; j < k; ++j) chosen += expf(l[id[j]] - top);
  const float total = normalize ? chosen : all;
  for (int64_t j = 0; j < k; ++j) w[j] = expf(l[id[j]] - top) / total;
}

}  // namespace

void route_experts(cudaStream_t stream, int32_t* ids, float* weights, const float* logits, int64_t ld_logits,
                   int64_t M, int64_t E, int64_t k, bool normalize) {
  if (M == 0) return;
  route_kernel<<<blocks_for(M, 128), 128, 0, stream>>>(ids, weights, logits, ld_logits, M, E, k, normalize);
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
