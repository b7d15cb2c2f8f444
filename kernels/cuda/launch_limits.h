// The limits of the CUDA kernels that the host's choice of kernel depends on, in plain C++ (no
// CUDA header), so that engine/cuda_choices.cpp compiles and is tested on any machine.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace minfer::cuda {

// matvec (matvec.cuh) takes 1 to this many activation rows: up to it the CUDA backend uses that
// kernel rather than cuBLAS; beyond it the product stops being purely bandwidth-bound and a Tensor
// Core GEMM wins.
constexpr int64_t kMatvecMaxRows = 8;

// gemm_quant_rows (gemm_quant_rows.cuh) takes quantized weights for kMatvecMaxRows + 1 to this
// many rows: each weight is read from memory once for all the rows, where the slabs of
// dequantize-to-f16 and cuBLASLt write and read every weight as f16 again at every call.
constexpr int64_t kQuantRowsMaxRows = 64;
// Its tiles: 64 weight rows a block, K in slices of 32 weights (a legacy block, or 4 groups of 8
// of a K-quant super-block); K may be split among blocks in whole slices (quant_rows_splits,
// engine/cuda_choices.h), each split at least kQuantRowsMinSplitSlices slices.
constexpr int64_t kQuantRowsTileN = 64;
constexpr int64_t kQuantRowsSlice = 32;
constexpr int64_t kQuantRowsMinSplitSlices = 4;

// The slices of K each of k_splits splits takes (the last may take fewer).
MINFER_HOST_DEVICE inline int64_t quant_rows_split_slices(int64_t K, int64_t k_splits) {
  const int64_t slices = K / kQuantRowsSlice;
  return (slices + k_splits - 1) / k_splits;
}

// Flash-decoding (attention_decode.cuh) splits the keys each row sees into n_splits chunks, one
// block each. n_splits is fixed per launch on the host (flash_decode_splits, engine/cuda_choices.h),
// but each row's chunk length is its own keys divided among them, at least kFlashMinChunkKeys, on
// the device: rows shorter than n_splits * kFlashMinChunkKeys leave their last splits empty.
constexpr int64_t kFlashMinChunkKeys = 64;

// The keys per chunk of a row that sees n_keys keys, split n_splits ways (host and device).
MINFER_HOST_DEVICE inline int64_t flash_chunk_keys(int64_t n_keys, int64_t n_splits) {
  const int64_t even = (n_keys + n_splits - 1) / n_splits;
  return even > kFlashMinChunkKeys ? even : kFlashMinChunkKeys;
}

// The chunks that hold keys, of a row that sees n_keys (at least one) keys.
MINFER_HOST_DEVICE inline int64_t flash_used_splits(int64_t n_keys, int64_t n_splits) {
  const int64_t chunk = flash_chunk_keys(n_keys, n_splits);
  return (n_keys + chunk - 1) / chunk;
}

}  // namespace minfer::cuda
