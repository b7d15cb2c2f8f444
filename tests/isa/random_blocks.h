// Random quantized blocks for the ISA test binaries (test_quant_dot.cpp, test_packed.cpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/quants.h"

namespace minfer::cpu {

constexpr DType kQuantTypes[] = {DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1,
                                 DType::q2_k, DType::q3_k, DType::q4_k, DType::q5_k, DType::q6_k};

// Sets every f16 scale of the blocks to f16(b), b the block's index.
template <class F16>
void set_scales(DType t, std::vector<uint8_t>& bytes, F16&& f16) {
  const int64_t nb = int64_t(bytes.size()) / dtype_block_bytes(t);
  for (int64_t b = 0; b < nb; ++b)
    for (int i = 0; i < scale_offsets(t).count; ++i) {
      const uint16_t h = f16(b);
      std::memcpy(bytes.data() + b * dtype_block_bytes(t) + scale_offsets(t).at[i], &h, 2);
    }
}

// Random blocks: random bytes everywhere, then f16 scales set to finite values of either sign.
// `edge`: scales at the extremes a file can hold (zero, tiny, large) and codes all at their top.
inline std::vector<uint8_t> random_blocks(DType t, int64_t nb, std::mt19937& rng, bool edge) {
  std::vector<uint8_t> bytes(static_cast<size_t>(nb * dtype_block_bytes(t)));
  for (auto& b : bytes) b = static_cast<uint8_t>(edge ? 0xFF : rng());
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  const float edges[] = {0.0f, 6.1e-5f, -3.0f, 1.0f};
  set_scales(t, bytes, [&](int64_t b) { return f32_to_f16(edge ? edges[b % 4] : scale(rng)); });
  return bytes;
}

}  // namespace minfer::cpu
