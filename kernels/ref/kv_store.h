#pragma once

#include <cstdint>

#include "engine/dtype.h"

namespace minfer::ref {

// Writes the keys and values of row m into the cache slot of its sequence and position:
//   k_cache[seq[m], pos[m], :] = k[m, :],  v_cache[seq[m], pos[m], :] = v[m, :]
// The cache may be f32, f16 or bf16 (rounded to nearest even on the way in).
void kv_store(void* k_cache, void* v_cache, DType cache_dtype,  // (B, S, kv_dim) each
              const float* k, int64_t ld_k,                     // (M, kv_dim)
              const float* v, int64_t ld_v,                     // (M, kv_dim)
              const int32_t* seq, const int32_t* pos,           // (M)
              int64_t M, int64_t kv_dim, int64_t S);

}  // namespace minfer::ref
