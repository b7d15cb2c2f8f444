#include "core/quants_blocks.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gather_rows.cuh"

namespace minfer::cuda {

namespace {
template <class T>
__global__ void gather_rows_kernel(float* out, int64_t ld_out, const T* table, const int32_t* ids, int64_t D,
                                   float scale) {
  const int64_t m = blockIdx.x;
  const T* row = table + int64_t(ids[m]) * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) out[m * ld_out + d] = to_float(row[d]) * scale;
}

// Quantized tables: a thread per group of 8 values (core/quants_blocks.h), dequantized exactly as
// on the host.
template <class Block>
__global__ void gather_rows_blocks_kernel(float* out, int64_t ld_out, const Block* table, const int32_t* ids,
                                        int64_t D, float scale) {
  constexpr int kGroups = blocks::Traits<Block>::kWeights / 8;
  const int64_t m = blockIdx.x;
  const Block* row = table + int64_t(ids[m]) * (D / blocks::Traits<Block>::kWeights);
  for (int64_t group = threadIdx.x; group < D / 8; group += blockDim.x) {
    float v[8];
    blocks::dequantize8(row[group / kGroups], static_cast<int>(group % kGroups), v);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[m * ld_out + 8 * group + i] = v[i] * scale;
  }
}
}  // namespace

void gather_rows(cudaStream_t stream, float* out, int64_t ld_out, const void* table, DType table_dtype,
                 const int32_t* ids, int64_t M, int64_t D, float scale) {
  if (M == 0) return;
  if (is_quantized(table_dtype)) {
    MINFER_CHECK(D % dtype_block(table_dtype) == 0, "gather_rows: ", dtype_name(table_dtype), " rows of ", D,
                 " values are not whole blocks");
    blocks::dispatch_block(table_dtype, [&](auto tag) {
      using Block = typename decltype(tag)::type;
      gather_rows_blocks_kernel<Block>
          <<<static_cast<unsigned>(M), 256, 0, stream>>>(out, ld_out, static_cast<const Block*>(table), ids, D, scale);
    });
    CUDA_CHECK_LAUNCH();
    return;
  }
  dispatch_float_type(table_dtype, [&](auto type) {
    using T = decltype(type);
    gather_rows_kernel<T><<<static_cast<unsigned>(M), 256, 0, stream>>>(out, ld_out, static_cast<const T*>(table), ids, D, scale);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace minfer::cuda
