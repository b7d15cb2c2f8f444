#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_cublas.cuh"

namespace minfer::cuda {

struct BlasGemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

BlasGemm::BlasGemm(cudaStream_t stream, void* workspace, size_t workspace_bytes)
    : stream_(stream), workspace_(workspace), workspace_bytes_(workspace_bytes) {
  CUBLAS_CHECK(cublasCreate(&blas_));
  CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  CUBLAS_CHECK(cublasSetWorkspace(blas_, workspace_, workspace_bytes_));
  // Plain f32 arithmetic: no TF32 unless asked for, so f32 results stay comparable to the CPU.
  CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
  CUBLAS_CHECK(cublasLtCreate(&lt_));
}

BlasGemm::~BlasGemm() {
  for (auto& [key, plan] : plans_) delete plan;
  if (lt_) cublasLtDestroy(lt_);
  if (blas_) cublasDestroy(blas_);
}

void BlasGemm::sgemm(float* out, int64_t ld_out, const float* x, int64_t ld_x, const float* w, int64_t M, int64_t N,
                     int64_t K) {
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(M),
                           static_cast<int>(K), &alpha, w, static_cast<int>(K), x, static_cast<int>(ld_x), &beta,
                           out, static_cast<int>(ld_out)));
}

BlasGemm::Plan& BlasGemm::plan_for(DType dtype, int64_t M, int64_t N, int64_t K, int64_t ld_out, bool device_alpha) {
  auto key = std::make_tuple(static_cast<int>(dtype), M, N, K, ld_out, device_alpha);
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  auto* plan = new Plan();
  plans_.emplace(key, plan);
  const cudaDataType_t input = dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none)));
  if (device_alpha) {
    const cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_DEVICE;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof(mode)));
  }
  // Column-major layouts as stored: A = w' (K x N), B = x' (K x M), C = D = out' (N x M).
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, input, static_cast<uint64_t>(K), static_cast<uint64_t>(N), K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, input, static_cast<uint64_t>(K), static_cast<uint64_t>(M), K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, CUDA_R_32F, static_cast<uint64_t>(N), static_cast<uint64_t>(M),
                                          ld_out));
  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace_bytes_, sizeof(workspace_bytes_)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt_, plan->op, plan->a, plan->b, plan->c, plan->c,
                                                         preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  CUBLAS_CHECK(status);
  MINFER_CHECK(found > 0, "cuBLASLt has no algorithm for a ", dtype_name(dtype), " product of ", M, " x ", N, " x ", K);
  plan->algo = result.algo;
  return *plan;
}

void BlasGemm::lt_gemm(float* out, int64_t ld_out, const void* x16, const void* w16, DType dtype, int64_t M,
                       int64_t N, int64_t K, const float* alpha_beta) {
  Plan& plan = plan_for(dtype, M, N, K, ld_out, alpha_beta != nullptr);
  const float ones[2] = {1.0f, 0.0f};
  const float* ab = alpha_beta != nullptr ? alpha_beta : ones;
  CUBLAS_CHECK(cublasLtMatmul(lt_, plan.op, &ab[0], w16, plan.a, x16, plan.b, &ab[1], out, plan.c, out, plan.c,
                              &plan.algo, workspace_, workspace_bytes_, stream_));
}

}  // namespace minfer::cuda
