// The CUDA backend's host-side choices (engine/cuda_choices.h), tested without a GPU: the kernel
// for each product by rows, weight type and --gemm, the refusals, and the attention kernel by
// algorithm and rows. The KV cache's default type is tested with the decoder (test_decoder.cpp).
#include <gtest/gtest.h>

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
    for (DType q : kQuantized)
      EXPECT_EQ(cuda_product(GemmKind::cublas, M, q), CudaProduct::dequantize_lt_gemm) << dtype_name(q);
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

TEST(CudaChoices, AttentionByAlgorithmAndRows) {
  for (int64_t M : {int64_t(1), kDecodeAttentionRows, kDecodeAttentionRows + 1, int64_t(2048)})
    EXPECT_EQ(cuda_attention(AttentionAlgorithm::three_pass, M), CudaAttention::three_pass) << M;
  EXPECT_EQ(cuda_attention(AttentionAlgorithm::online_softmax, 1), CudaAttention::flash_decode);
  EXPECT_EQ(cuda_attention(AttentionAlgorithm::online_softmax, kDecodeAttentionRows), CudaAttention::flash_decode);
  EXPECT_EQ(cuda_attention(AttentionAlgorithm::online_softmax, kDecodeAttentionRows + 1), CudaAttention::prefill);
  EXPECT_EQ(cuda_attention(AttentionAlgorithm::online_softmax, 2048), CudaAttention::prefill);
}

}  // namespace
}  // namespace minfer
