#include "kernels/ref/fill.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "core/quants.h"
#include "kernels/ref/element.h"

namespace minfer::ref {

namespace {

void set_f16(uint8_t* block, size_t offset, float value) {
  const uint16_t h = f32_to_f16(value);
  std::memcpy(block + offset, &h, 2);
}

}  // namespace

void fill_k_quant_blocks(void* data, DType dtype, int64_t first, int64_t count, uint64_t seed, float lo, float hi) {
  MINFER_CHECK(is_k_quant(dtype), "fill_k_quant_blocks: ", dtype_name(dtype), " is not a K-quant");
  const size_t bytes = size_t(dtype_block_bytes(dtype));
  const float amp = std::max(std::fabs(lo), std::fabs(hi));
  for (int64_t b = first; b < first + count; ++b) {
    uint8_t* block = static_cast<uint8_t*>(data) + size_t(b) * bytes;
    for (size_t i = 0; i < bytes; ++i) block[i] = static_cast<uint8_t>(mix64(mix64(seed) ^ (uint64_t(b) * 256 + i)) >> 56);
    // The largest |w| each type can hold: d * (top scale) * (top code) + dmin * (top min); half of
    // amp goes to each term where there are two.
    switch (dtype) {
      case DType::q2_k: set_f16(block, offsetof(BlockQ2_K, d), amp / 90.0f); set_f16(block, offsetof(BlockQ2_K, dmin), amp / 30.0f); break;
      case DType::q3_k: set_f16(block, offsetof(BlockQ3_K, d), amp / 128.0f); break;
      case DType::q4_k: set_f16(block, offsetof(BlockQ4_K, d), amp / 1890.0f); set_f16(block, offsetof(BlockQ4_K, dmin), amp / 126.0f); break;
      case DType::q5_k: set_f16(block, offsetof(BlockQ5_K, d), amp / 3906.0f); set_f16(block, offsetof(BlockQ5_K, dmin), amp / 126.0f); break;
      default: set_f16(block, offsetof(BlockQ6_K, d), amp / 4096.0f); break;
    }
  }
}

void fill_uniform(void* data, DType dtype, int64_t n, uint64_t seed, float lo, float hi) {
  if (is_k_quant(dtype)) {
    MINFER_CHECK(n % kQK == 0, "fill_uniform: ", n, " elements are not whole ", dtype_name(dtype), " blocks");
    return fill_k_quant_blocks(data, dtype, 0, n / kQK, seed, lo, hi);
  }
  if (is_quantized(dtype)) {  // each block's values, quantized together
    const int64_t size = dtype_block(dtype);
    MINFER_CHECK(n % size == 0, "fill_uniform: ", n, " elements are not whole ", dtype_name(dtype), " blocks");
    float block[kQK];
    for (int64_t b = 0; b < n / size; ++b) {
      for (int64_t j = 0; j < size; ++j) block[j] = uniform_at(seed, uint64_t(b * size + j), lo, hi);
      quantize_row(dtype, static_cast<char*>(data) + b * dtype_block_bytes(dtype), block, size_t(size));
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) store_element(data, dtype, i, uniform_at(seed, uint64_t(i), lo, hi));
}

}  // namespace minfer::ref
