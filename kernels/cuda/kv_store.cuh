// Writes each row's keys and values into the KV cache at (sequence, head, position), through the
// sequence's block table (kernels/ref/kv_store.h), converting to the cache's dtype (f32, f16 or
// bf16). One block per row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/ref/kv_store.h"

namespace minfer::cuda {

void kv_store(cudaStream_t stream,
              void* k_cache, void* v_cache, DType cache_dtype,  // (n_blocks, n_kv_heads, block_size, head_dim)
              const float* k, int64_t ld_k,                     // (M, n_kv_heads * head_dim)
              const float* v, int64_t ld_v,                     // (M, n_kv_heads * head_dim)
              const int32_t* seq, const int32_t* pos,           // (M)
              int64_t M, int64_t n_kv_heads, int64_t head_dim,
              const ref::KvBlockTable& table);  // its blocks on the device

}  // namespace minfer::cuda
