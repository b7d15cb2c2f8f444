// Checking every CUDA runtime, cuBLAS and cuBLASLt call: a failure throws minfer::Error with the
// file, the line, the call and the library's error string.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/error.h"

namespace minfer::cuda {

[[noreturn]] void fail_cuda(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void fail_cublas(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace minfer::cuda

#define CUDA_CHECK(call)                                                            \
  do {                                                                              \
    cudaError_t status_ = (call);                                                   \
    if (status_ != cudaSuccess) ::minfer::cuda::fail_cuda(status_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                          \
  do {                                                                              \
    cublasStatus_t status_ = (call);                                                \
    if (status_ != CUBLAS_STATUS_SUCCESS)                                           \
      ::minfer::cuda::fail_cublas(status_, #call, __FILE__, __LINE__);              \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, not at the next sync.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
