// The limits of the CUDA kernels that the host's choice of kernel depends on, in plain C++ (no
// CUDA header), so that engine/cuda_choices.cpp compiles and is tested on any machine.
#pragma once

#include <cstdint>

namespace minfer::cuda {

// matvec (matvec.cuh) takes 1 to this many activation rows: up to it the CUDA backend uses that
// kernel rather than cuBLAS; beyond it the product stops being purely bandwidth-bound and a Tensor
// Core GEMM wins.
constexpr int64_t kMatvecMaxRows = 8;

}  // namespace minfer::cuda
