// The cuBLAS and cuBLASLt entry points minfer calls, defined here and resolved on first use with
// dlopen, so that the two libraries are loaded only by a process that multiplies on a GPU.
//
// note: linked the usual way, libcublasLt alone (540 MB on disk) costs every minfer process about
// 200 MB of resident memory before main() runs: its 96 MB .ldata section is full of pointers that
// the dynamic loader relocates, which makes those pages private. A CPU decode of a 438 MB model then
// peaked at 1.36 times the file's size. minfer therefore links neither library; each function below
// has the signature cublas_v2.h and cublasLt.h declare, looks its namesake up in the real library
// the first time it is called, and forwards to it. A machine without the libraries gets an Error
// naming the file on the first GPU product, not at start-up.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "core/error.h"

namespace minfer {
namespace {

// dlopen by soname (the loader's path and the executable's RUNPATH), then in the toolkit's library
// folder this build was configured with.
void* open_library(const std::string& soname) {
  void* handle = ::dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const std::string first = ::dlerror();
    handle = ::dlopen((std::string(MINFER_CUDA_LIBRARY_DIR) + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) fail("cannot load ", soname, " (", first, ")");
  }
  return handle;
}

void* blas() {
  static void* handle = open_library("libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
  return handle;
}

void* blas_lt() {
  static void* handle = open_library("libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
  return handle;
}

template <class F>
F* resolve(void* library, const char* name) {
  void* p = ::dlsym(library, name);
  if (p == nullptr) fail("cuBLAS: ", name, " not found (", ::dlerror(), ")");
  return reinterpret_cast<F*>(p);
}

}  // namespace
}  // namespace minfer

using minfer::blas;
using minfer::blas_lt;
using minfer::resolve;

// Each forwarder resolves its function once (function-local statics are initialized thread-safely).
#define MINFER_FORWARD(library, name, ...)                             \
  static auto* const real = resolve<decltype(name)>(library(), #name); \
  return real(__VA_ARGS__)

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) { MINFER_FORWARD(blas, cublasCreate_v2, handle); }

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) { MINFER_FORWARD(blas, cublasDestroy_v2, handle); }

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  MINFER_FORWARD(blas, cublasGetStatusString, status);
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  MINFER_FORWARD(blas, cublasSetMathMode, handle, mode);
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  MINFER_FORWARD(blas, cublasSetStream_v2, handle, stream);
}

cublasStatus_t CUBLASWINAPI cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  MINFER_FORWARD(blas, cublasSetWorkspace_v2, handle, workspace, bytes);
}

cublasStatus_t CUBLASWINAPI cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                           int m, int n, int k, const float* alpha, const float* A, int lda,
                                           const float* B, int ldb, const float* beta, float* C, int ldc) {
  MINFER_FORWARD(blas, cublasSgemm_v2, handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) { MINFER_FORWARD(blas_lt, cublasLtCreate, handle); }

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) {
  MINFER_FORWARD(blas_lt, cublasLtDestroy, handle);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                           const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                                           cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                                           cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                           cudaStream_t stream) {
  MINFER_FORWARD(blas_lt, cublasLtMatmul, handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
                 workspace, workspace_bytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                           cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                           cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                           cublasLtMatmulPreference_t preference, int requested,
                                                           cublasLtMatmulHeuristicResult_t results[], int* returned) {
  MINFER_FORWARD(blas_lt, cublasLtMatmulAlgoGetHeuristic, handle, desc, Adesc, Bdesc, Cdesc, Ddesc, preference,
                 requested, results, returned);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  MINFER_FORWARD(blas_lt, cublasLtMatmulDescCreate, desc, compute, scale);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  MINFER_FORWARD(blas_lt, cublasLtMatmulDescDestroy, desc);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                           size_t bytes) {
  MINFER_FORWARD(blas_lt, cublasLtMatmulDescSetAttribute, desc, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  MINFER_FORWARD(blas_lt, cublasLtMatmulPreferenceCreate, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  MINFER_FORWARD(blas_lt, cublasLtMatmulPreferenceDestroy, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                 cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void* buf, size_t bytes) {
  MINFER_FORWARD(blas_lt, cublasLtMatmulPreferenceSetAttribute, pref, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
  MINFER_FORWARD(blas_lt, cublasLtMatrixLayoutCreate, layout, type, rows, cols, ld);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  MINFER_FORWARD(blas_lt, cublasLtMatrixLayoutDestroy, layout);
}

}  // extern "C"
