// Seeded uniform values (kernels/ref/fill.h): element i depends only on (seed, i), so the GPU
// fills a preset's weights with exactly the values the CPU or `minfer make-model` would: plain
// types, legacy quantized blocks of those values (quantized by core/quants_blocks.h, the host's
// code), and K-quants' synthetic blocks (ref::fill_k_quant_blocks).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace minfer::cuda {

void fill_uniform(cudaStream_t stream, void* t, DType dtype,  // (n)
                  int64_t n, uint64_t seed, float lo, float hi);

}  // namespace minfer::cuda
