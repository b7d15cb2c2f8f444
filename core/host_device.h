// Functions the host and CUDA kernels share are marked MINFER_HOST_DEVICE: __host__ __device__
// under nvcc, nothing under the host compiler.
#pragma once

#if defined(__CUDACC__)
#define MINFER_HOST_DEVICE __host__ __device__
#else
#define MINFER_HOST_DEVICE
#endif
