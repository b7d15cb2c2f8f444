// Quantized blocks to f32 and back (core/quants.h), a block at a time through core/quants_blocks.h
// (the arithmetic the CUDA kernels share). Compiled with -ffp-contract=off: a fused multiply-add
// in x * id + 8.5 would round once where the gguf package rounds twice, and moves codes at ties
// (tests/test_quants.cpp has such blocks). Dequantization is exact either way: an f16 scale times
// small integers fits float32's 24 bits, so only its one addition rounds.
#include "core/quants.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/quants_blocks.h"

namespace minfer {

namespace {

// The blocks of n weights, each dequantized by core/quants_blocks.h.
template <typename Block>
void each_block(float* y, const void* src, size_t n) {
  constexpr size_t size = blocks::Traits<Block>::kWeights;
  const auto* b = static_cast<const Block*>(src);
  for (size_t i = 0; i < n / size; ++i) blocks::dequantize_block(b[i], y + i * size);
}
template <typename Block>
void quantize_blocks(void* dst, const float* src, size_t n) {
  auto* b = static_cast<Block*>(dst);
  for (size_t i = 0; i < n / 32; ++i) blocks::quantize_block(b[i], src + i * 32);
}

}  // namespace

void quantize_q8_0(BlockQ8* dst, const float* src, size_t n) {
  for (size_t b = 0; b < n / 32; ++b) {
    const float* x = src + b * 32;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = f32_to_f16(d);
    for (int j = 0; j < 32; ++j) dst[b].q[j] = static_cast<int8_t>(std::roundf(x[j] * id));
  }
}


void dequantize_row(DType t, float* dst, const void* src, size_t n) {
  const size_t block = size_t(dtype_block(t));
  MINFER_CHECK(is_quantized(t), "dequantize_row: ", dtype_name(t), " is not a quantized type");
  MINFER_CHECK(n % block == 0, dtype_name(t), ": ", n, " elements are not whole blocks of ", block);
  blocks::dispatch_block(t, [&](auto tag) { each_block<typename decltype(tag)::type>(dst, src, n); });
}

void quantize_row(DType t, void* dst, const float* src, size_t n) {
  MINFER_CHECK(n % 32 == 0, dtype_name(t), ": ", n, " elements are not whole blocks of 32");
  switch (t) {
    case DType::q8_0: return quantize_q8_0(static_cast<BlockQ8*>(dst), src, n);
    case DType::q4_0: return quantize_blocks<BlockQ4_0>(dst, src, n);
    case DType::q5_0: return quantize_blocks<BlockQ5_0>(dst, src, n);
    case DType::q4_1: return quantize_blocks<BlockQ4_1>(dst, src, n);
    case DType::q5_1: return quantize_blocks<BlockQ5_1>(dst, src, n);
    default: fail("cannot quantize to ", dtype_name(t), " (minfer makes q8_0, q4_0, q4_1, q5_0 and q5_1)");
  }
}

}  // namespace minfer
