// Seeded uniform values for synthetic weights, the same on every device.
//
// The value of element i depends only on (seed, i): a counter-based generator (the splitmix64
// finaliser over seed and index) instead of a sequential one, so any thread on any device can
// compute any element, and a preset built on the GPU is bit-for-bit the preset built on the CPU
// or written to a file by `minfer make-model`. The affine map uses an explicit fused multiply-add
// in double, which rounds identically on the host and on the GPU.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/host_device.h"
#include "core/splitmix.h"

namespace minfer::ref {

MINFER_HOST_DEVICE inline uint64_t mix64(uint64_t z) { return splitmix64_finalize(z + 0x9e3779b97f4a7c15ull); }

// A float in [lo, hi) for element `index` of the stream `seed`.
MINFER_HOST_DEVICE inline float uniform_at(uint64_t seed, uint64_t index, float lo, float hi) {
  uint64_t bits = mix64(mix64(seed) ^ index);
  double u = static_cast<double>(bits >> 40) * (1.0 / 16777216.0);  // 24 random bits, exact
  return static_cast<float>(fma(static_cast<double>(hi) - static_cast<double>(lo), u,
                                static_cast<double>(lo)));
}

// data[i] = uniform_at(seed, i, lo, hi) for i < n, stored as f32, f16, bf16, or as blocks of a
// legacy quantized type (q8_0, q4_0 .. q5_1) of those values quantized (n whole blocks of 32).
// K-quants, which nothing here quantizes to, get fill_k_quant_blocks' synthetic blocks.
void fill_uniform(void* data, DType dtype, int64_t n, uint64_t seed, float lo, float hi);

// Blocks [first, first + count) of synthetic K-quant weights for the stream `seed` (presets'
// random weights in a K-quant type, to measure what its bytes cost): codes, sub-scales and mins
// are random bytes, and the f16 scales are set so that no weight exceeds max(|lo|, |hi|). Block b
// depends only on (seed, b), like uniform_at's elements.
void fill_k_quant_blocks(void* data, DType dtype, int64_t first, int64_t count, uint64_t seed, float lo, float hi);

}  // namespace minfer::ref
