// Matrix products through NVIDIA's libraries: cuBLAS SGEMM for f32 weights, cuBLASLt for f16
// and bf16 weights on Tensor Cores with f32 accumulation (CUBLAS_COMPUTE_32F) and f32 output.
//
// note: minfer's matrices are row-major and weights are (N, K). cuBLAS is column-major, and a
// row-major (R, C) matrix is the column-major (C, R) one, so out (M, N) = x (M, K) w^T is
// computed as out^T (N, M) = w' (K, N)^T x' (K, M): op(A) = transposed weights, op(B) = the
// activations as they are, and no data moves.
//
// cuBLASLt picks an algorithm per problem shape with a heuristic query; the answer is cached per
// shape, so the query runs once and a captured CUDA Graph never calls it. A fixed workspace is
// handed to both libraries so that they never allocate (allocation is illegal during capture).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "core/dtype.h"

namespace minfer::cuda {

class BlasGemm {
 public:
  // `workspace` (device memory of `workspace_bytes`) must outlive this object.
  BlasGemm(cudaStream_t stream, void* workspace, size_t workspace_bytes);
  ~BlasGemm();
  BlasGemm(const BlasGemm&) = delete;
  BlasGemm& operator=(const BlasGemm&) = delete;

  // out (M, N) = x (M, K) * w (N, K)^T, all f32
  void sgemm(float* out, int64_t ld_out,    // (M, N)
             const float* x, int64_t ld_x,  // (M, K)
             const float* w,                // (N, K), dense
             int64_t M, int64_t N, int64_t K);
  // out f32 (M, N) = alpha * x16 (M, K) * w16 (N, K)^T with x16 and w16 both f16 or both bf16;
  // alpha_beta: {alpha, beta = 0} on the device (cast_rows_f16_scaled's unscaling), or nullptr for 1
  void lt_gemm(float* out, int64_t ld_out,  // (M, N)
               const void* x16,             // (M, K), dense
               const void* w16,             // (N, K), dense
               DType dtype, int64_t M, int64_t N, int64_t K,
               const float* alpha_beta = nullptr);  // (2), device

 private:
  struct Plan;
  Plan& plan_for(DType dtype, int64_t M, int64_t N, int64_t K, int64_t ld_out, bool device_alpha);

  cudaStream_t stream_;
  void* workspace_;
  size_t workspace_bytes_;
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  std::map<std::tuple<int, int64_t, int64_t, int64_t, int64_t, bool>, Plan*> plans_;
};

}  // namespace minfer::cuda
