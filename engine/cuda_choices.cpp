#include "engine/cuda_choices.h"

#include <algorithm>

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
  if (is_quantized(w)) return M <= cuda::kQuantRowsMaxRows ? CudaProduct::quant_rows : CudaProduct::dequantize_lt_gemm;
  return CudaProduct::lt_gemm;
}

bool attention_prefill_on_tensor_cores(DType cache_dtype, int64_t head_dim) {
  return (cache_dtype == DType::f16 || cache_dtype == DType::bf16) && (head_dim == 64 || head_dim == 128);
}

CudaAttention cuda_attention(AttentionAlgorithm algorithm, int64_t M, DType cache_dtype, int64_t head_dim) {
  if (algorithm == AttentionAlgorithm::three_pass) return CudaAttention::three_pass;
  return M > kDecodeAttentionRows && attention_prefill_on_tensor_cores(cache_dtype, head_dim)
             ? CudaAttention::prefill_tiles
             : CudaAttention::flash_decode;
}

int64_t flash_decode_splits(int64_t row_heads, int64_t max_keys, int64_t sm_count) {
  MINFER_CHECK(row_heads >= 1 && max_keys >= 1 && sm_count >= 1, "flash_decode_splits: ", row_heads,
               " (row, head) pairs, ", max_keys, " keys, ", sm_count, " SMs");
  const int64_t to_fill = (kFlashBlocksPerSm * sm_count + row_heads - 1) / row_heads;
  const int64_t most = (max_keys + cuda::kFlashMinChunkKeys - 1) / cuda::kFlashMinChunkKeys;
  return std::max<int64_t>(1, std::min(to_fill, most));
}

int64_t quant_rows_splits(int64_t N, int64_t K, int64_t sm_count) {
  MINFER_CHECK(N >= 1 && K >= cuda::kQuantRowsSlice && sm_count >= 1, "quant_rows_splits: N ", N, ", K ", K, ", ",
               sm_count, " SMs");
  const int64_t tiles = (N + cuda::kQuantRowsTileN - 1) / cuda::kQuantRowsTileN;
  const int64_t to_fill = (kQuantRowsBlocksPerSm * sm_count + tiles - 1) / tiles;
  const int64_t most = K / cuda::kQuantRowsSlice / cuda::kQuantRowsMinSplitSlices;
  return std::max<int64_t>(1, std::min(to_fill, most));
}

}  // namespace minfer
