#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/threads.h"

namespace minfer::cpu {

// data[i] = ref::uniform_at(seed, i, lo, hi), across the threads (see kernels/ref/fill.h).
void fill_uniform(ThreadPool& pool, void* data, DType dtype, int64_t n, uint64_t seed, float lo,
                  float hi);

}  // namespace minfer::cpu
