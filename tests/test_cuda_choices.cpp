// The CUDA backend's host-side choices (engine/cuda_choices.h), tested without a GPU: the kernel
// for each product by rows, weight type and --gemm, the refusals, the attention kernel by
// algorithm, rows and cache, and flash-decoding's splits and chunks (kernels/cuda/launch_limits.h).
// The KV cache's default type is tested with the decoder (test_decoder.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "engine/cuda_choices.h"
#include "kernels/cuda/launch_limits.h"

namespace minfer {
namespace {

constexpr DType kQuantized[] = {DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1,
                                DType::q2_k, DType::q3_k, DType::q4_k, DType::q5_k, DType::q6_k};

TEST(CudaChoices, ProductsByRowsAndWeightType) {
  const int64_t edge = cuda::kMatvecMaxRows;
  ASSERT_EQ(edge, 8);
  for (int64_t M : {int64_t(1), edge}) {
    EXPECT_EQ(cuda_product(GemmKind::cublas, M, DType::f32), CudaProduct::matvec) << M;
    EXPECT_EQ(cuda_product(GemmKind::cublas, M, DType::bf16), CudaProduct::matvec) << M;
    for (DType q : kQuantized) EXPECT_EQ(cuda_product(GemmKind::cublas, M, q), CudaProduct::matvec) << dtype_name(q);
  }
  for (int64_t M : {edge + 1, int64_t(512)}) {
    EXPECT_EQ(cuda_product(GemmKind::cublas, M, DType::f32), CudaProduct::sgemm) << M;
    EXPECT_EQ(cuda_product(GemmKind::cublas, M, DType::f16), CudaProduct::lt_gemm) << M;
    EXPECT_EQ(cuda_product(GemmKind::cublas, M, DType::bf16), CudaProduct::lt_gemm) << M;
  }
}

// Issue 57: quantized products of 9 to 64 rows read each weight once (gemm_quant_rows) instead
// of dequantizing the whole matrix to f16 at every call; from 65 rows the f16 slabs and cuBLASLt.
TEST(CudaChoices, QuantizedProductsOfAFewRowsReadEachWeightOnce) {
  const int64_t edge = cuda::kQuantRowsMaxRows;
  ASSERT_EQ(edge, 64);
  for (DType q : kQuantized) {
    EXPECT_EQ(cuda_product(GemmKind::cublas, cuda::kMatvecMaxRows, q), CudaProduct::matvec) << dtype_name(q);
    for (int64_t M : {cuda::kMatvecMaxRows + 1, int64_t(16), edge})
      EXPECT_EQ(cuda_product(GemmKind::cublas, M, q), CudaProduct::quant_rows) << dtype_name(q) << " M " << M;
    for (int64_t M : {edge + 1, int64_t(512)})
      EXPECT_EQ(cuda_product(GemmKind::cublas, M, q), CudaProduct::dequantize_lt_gemm) << dtype_name(q) << " M " << M;
  }
}

TEST(CudaChoices, HandWrittenGemmsTakeEveryRowCount) {
  for (int64_t M : {1, 8, 9, 300}) {
    EXPECT_EQ(cuda_product(GemmKind::naive, M, DType::f32), CudaProduct::naive) << M;
    EXPECT_EQ(cuda_product(GemmKind::tiled, M, DType::bf16), CudaProduct::tiled) << M;
    EXPECT_EQ(cuda_product(GemmKind::mma, M, DType::f16), CudaProduct::mma) << M;
  }
}

// What no kernel takes is refused with a line naming the fix, before anything is launched.
TEST(CudaChoices, ImpossibleProductsAreRefusedByName) {
  auto message = [](GemmKind g, DType w) {
    try {
      cuda_product(g, 64, w);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  for (GemmKind g : {GemmKind::naive, GemmKind::tiled, GemmKind::mma})
    for (DType q : {DType::q8_0, DType::q4_k}) {
      const std::string m = message(g, q);
      EXPECT_NE(m.find("(use --gemm cublas)"), std::string::npos) << gemm_name(g) << " " << dtype_name(q) << ": " << m;
    }
  for (DType w : {DType::f32, DType::bf16}) {
    const std::string m = message(GemmKind::mma, w);
    EXPECT_NE(m.find("(use --dtype f16)"), std::string::npos) << dtype_name(w) << ": " << m;
  }
}

// gemm_quant_rows splits K among blocks so that a matrix of few 64-row tiles still fills the GPU,
// in whole slices of 32, at least 4 slices a split; the splits cover K whatever it is (a split
// past the last slice, possible when K is not a multiple of the share, writes zeros).
TEST(CudaChoices, QuantizedRowsSplitKToFillTheGpu) {
  const int64_t sms = 132, fill = kQuantRowsBlocksPerSm * sms;
  EXPECT_EQ(quant_rows_splits(4096, 4096, sms), (fill + 63) / 64);           // llama-7b's q, k, v, o: 9
  EXPECT_EQ(quant_rows_splits(fill * 64, 4096, sms), 1);                    // enough tiles alone
  EXPECT_EQ(quant_rows_splits(fill * 64 - 64, 4096, sms), 2);
  EXPECT_EQ(quant_rows_splits(33, 96, sms), 1);                             // 3 slices: too few to split
  EXPECT_EQ(quant_rows_splits(33, 4 * cuda::kQuantRowsSlice * cuda::kQuantRowsMinSplitSlices - 32, sms), 3);
  EXPECT_EQ(quant_rows_splits(33, 512, sms), 4);                            // 16 slices, 4 each
  EXPECT_EQ(quant_rows_splits(128, 1 << 16, 1), 2);                         // one SM, 2 tiles
  EXPECT_THROW(quant_rows_splits(0, 512, sms), Error);
  for (int64_t K : {int64_t(32), int64_t(96), int64_t(256), int64_t(288), int64_t(512), int64_t(4096),
                    int64_t(14336)})
    for (int64_t N : {int64_t(1), int64_t(33), int64_t(896), int64_t(4096)}) {
      const int64_t splits = quant_rows_splits(N, K, sms), share = cuda::quant_rows_split_slices(K, splits);
      ASSERT_GE(splits, 1);
      ASSERT_GE(splits * share * cuda::kQuantRowsSlice, K) << "N " << N << " K " << K << ": slices left out";
      if (splits > 1) {
        ASSERT_GE(share, cuda::kQuantRowsMinSplitSlices) << "N " << N << " K " << K;
      }
    }
}

// Issue 57: above 64 rows the prefill tiles run only where they run on Tensor Cores, beside
// flash-decoding for the step's other rows; every other cache and head size is flash-decoding's.
TEST(CudaChoices, AttentionByAlgorithmRowsAndCache) {
  const AttentionAlgorithm online = AttentionAlgorithm::online_softmax;
  for (int64_t M : {int64_t(1), kDecodeAttentionRows, kDecodeAttentionRows + 1, int64_t(2048)})
    EXPECT_EQ(cuda_attention(AttentionAlgorithm::three_pass, M, DType::f16, 64), CudaAttention::three_pass) << M;
  for (DType cache : {DType::f16, DType::bf16})
    for (int64_t head_dim : {64, 128}) {
      EXPECT_TRUE(attention_prefill_on_tensor_cores(cache, head_dim));
      EXPECT_EQ(cuda_attention(online, 1, cache, head_dim), CudaAttention::flash_decode);
      EXPECT_EQ(cuda_attention(online, kDecodeAttentionRows, cache, head_dim), CudaAttention::flash_decode);
      EXPECT_EQ(cuda_attention(online, kDecodeAttentionRows + 1, cache, head_dim), CudaAttention::prefill_tiles);
      EXPECT_EQ(cuda_attention(online, 2048, cache, head_dim), CudaAttention::prefill_tiles);
    }
  for (auto [cache, head_dim] : {std::pair{DType::f32, int64_t(64)}, std::pair{DType::f16, int64_t(256)},
                                 std::pair{DType::bf16, int64_t(32)}, std::pair{DType::f32, int64_t(128)}}) {
    EXPECT_FALSE(attention_prefill_on_tensor_cores(cache, head_dim)) << dtype_name(cache) << " " << head_dim;
    EXPECT_EQ(cuda_attention(online, 2048, cache, head_dim), CudaAttention::flash_decode)
        << dtype_name(cache) << " " << head_dim;
  }
}

// Issue 57: flash-decoding launched n_ctx / 256 splits whatever the positions. Now: enough blocks
// to fill the GPU (kFlashBlocksPerSm per SM), at most what the longest row may need at
// kFlashMinChunkKeys a chunk, at least one; at the edges of both.
TEST(CudaChoices, FlashDecodingSplitsFillTheGpuAndNoMore) {
  const int64_t chunk = cuda::kFlashMinChunkKeys, sms = 132, fill = kFlashBlocksPerSm * sms;
  EXPECT_EQ(flash_decode_splits(1, 1, sms), 1);
  EXPECT_EQ(flash_decode_splits(1, chunk, sms), 1);
  EXPECT_EQ(flash_decode_splits(1, chunk + 1, sms), 2);
  EXPECT_EQ(flash_decode_splits(1, 1 << 20, sms), fill);                  // one sequence, one head
  EXPECT_EQ(flash_decode_splits(32, 1 << 20, sms), (fill + 31) / 32);     // 32 heads: 33
  EXPECT_EQ(flash_decode_splits(32, 4 * chunk, sms), 4);                  // a short context
  EXPECT_EQ(flash_decode_splits(fill, 1 << 20, sms), 1);                  // rows x heads fill it alone
  EXPECT_EQ(flash_decode_splits(fill - 1, 1 << 20, sms), 2);
  EXPECT_EQ(flash_decode_splits(64 * 32, 32768, sms), 1);                 // 64 rows at 32k: was 128
  EXPECT_EQ(flash_decode_splits(8, 32768, 1), 1);                         // one SM
  EXPECT_THROW(flash_decode_splits(0, 100, sms), Error);
  EXPECT_THROW(flash_decode_splits(1, 0, sms), Error);
}

// The chunks a row's keys are split into (computed on the device from its own position): they
// cover its n_keys keys exactly, in at most n_splits chunks of at least kFlashMinChunkKeys, for
// every length up to the capacity the splits were chosen for. That is what keeps a recorded step
// right at every later position: the splits are fixed, the chunks grow with the row.
TEST(CudaChoices, FlashDecodingChunksCoverEveryRowAtAnyPosition) {
  for (int64_t max_keys : {int64_t(1), int64_t(64), int64_t(65), int64_t(300), int64_t(4096), int64_t(32768)})
    for (int64_t row_heads : {int64_t(1), int64_t(14), int64_t(256), int64_t(5000)}) {
      const int64_t splits = flash_decode_splits(row_heads, max_keys, 132);
      auto check = [&](int64_t n) {
        const int64_t chunk = cuda::flash_chunk_keys(n, splits), used = cuda::flash_used_splits(n, splits);
        ASSERT_GE(chunk, cuda::kFlashMinChunkKeys);
        ASSERT_GE(used, 1);
        ASSERT_LE(used, splits) << "keys " << n << " of " << max_keys << " need more than " << splits << " splits";
        ASSERT_GE(used * chunk, n) << "keys " << n << " left out";
        ASSERT_LT((used - 1) * chunk, n) << "keys " << n << ": an empty chunk counted as used";
      };
      for (int64_t n = 1; n < max_keys; n += n < 300 ? 1 : 97) check(n);
      check(max_keys);
    }
}

}  // namespace
}  // namespace minfer
