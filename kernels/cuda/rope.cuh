// Rotary position embedding over llama2.c's interleaved pairs, reading (cos, sin) from the
// model's precomputed table, and its fused variant that also writes the rotated keys and the
// values into the KV cache in the same pass (one read of q, k and v instead of two of k).
// One block per row; each thread rotates pairs of a strided slice of the row's heads. The fused
// variant is the same kernel with kStoreKV = true; the op harness checks it against rope() twice
// and kv_store().
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/ref/kv_store.h"

namespace minfer::cuda {

void rope(cudaStream_t stream,
          float* x, int64_t ld_x,  // (M, n_heads * head_dim), in place
          const int32_t* pos,      // (M)
          const float* table,      // (positions, head_dim / 2, 2)
          int64_t M, int64_t n_heads, int64_t head_dim);

void rope_kv_store(cudaStream_t stream,
                   void* k_cache, void* v_cache, DType cache_dtype,  // (n_blocks, n_kv_heads, block_size, head_dim)
                   float* q, int64_t ld_q,                   // (M, n_heads * head_dim), in place
                   float* k, int64_t ld_k,                   // (M, n_kv_heads * head_dim), in place
                   const float* v, int64_t ld_v,             // (M, n_kv_heads * head_dim)
                   const int32_t* seq, const int32_t* pos,  // (M)
                   const float* table,                       // (positions, head_dim / 2, 2)
                   int64_t M, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                   const ref::KvBlockTable& cache_table);  // the cache's; its blocks on the device

}  // namespace minfer::cuda
