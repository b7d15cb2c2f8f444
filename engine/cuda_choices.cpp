#include "engine/cuda_choices.h"

#include "core/error.h"
#include "kernels/cuda/launch_limits.h"

namespace minfer {

CudaProduct cuda_product(GemmKind gemm, int64_t M, DType w) {
  MINFER_CHECK(gemm == GemmKind::cublas || !is_quantized(w), "--gemm ", gemm_name(gemm),
               " takes f32, f16 or bf16 weights, not ", dtype_name(w), " (use --gemm cublas)");
  switch (gemm) {
    case GemmKind::naive: return CudaProduct::naive;
    case GemmKind::tiled: return CudaProduct::tiled;
    case GemmKind::mma:
      MINFER_CHECK(w == DType::f16, "--gemm mma multiplies f16 weights on Tensor Cores; the weights are ",
                   dtype_name(w), " (use --dtype f16)");
      return CudaProduct::mma;
    case GemmKind::cublas: break;
  }
  if (M <= cuda::kMatvecMaxRows) return CudaProduct::matvec;
  if (w == DType::f32) return CudaProduct::sgemm;
  if (is_quantized(w)) return CudaProduct::dequantize_lt_gemm;
  return CudaProduct::lt_gemm;
}

CudaAttention cuda_attention(AttentionAlgorithm algorithm, int64_t M) {
  if (algorithm == AttentionAlgorithm::three_pass) return CudaAttention::three_pass;
  return M > kDecodeAttentionRows ? CudaAttention::prefill : CudaAttention::flash_decode;
}

}  // namespace minfer
