// Host-side f16 and bf16 conversion: exhaustive round trips, round-to-nearest-even at the
// boundaries, and NaN/Inf preserved.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/quants.h"
#include "core/error.h"

namespace minfer {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_bytes(DType::f32, 1), 4u);
  EXPECT_EQ(dtype_bytes(DType::f16, 1), 2u);
  EXPECT_EQ(dtype_bytes(DType::bf16, 1), 2u);
  EXPECT_EQ(dtype_bytes(DType::i32, 1), 4u);
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_THROW(parse_dtype("f8"), Error);
}

TEST(DType, F16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    uint16_t back = f32_to_f16(f);
    bool is_nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
    if (is_nan) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_EQ(back & 0x7c00u, 0x7c00u) << h;
      EXPECT_NE(back & 0x3ffu, 0u) << h;
      EXPECT_EQ(back & 0x8000u, h & 0x8000u) << h;
    } else {
      EXPECT_EQ(back, h) << "f16 0x" << std::hex << h;
    }
  }
}

TEST(DType, F16KnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);        // below the halfway point to 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);        // halfway, ties to even: Inf
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
  EXPECT_EQ(f32_to_f16(5.9604644775390625e-08f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(2.98023223876953125e-08f), 0x0000);  // half of it: ties to even, 0
  EXPECT_EQ(f32_to_f16(2.98023259e-08f), 0x0001);          // just above half
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even stays at 1.
  EXPECT_EQ(f32_to_f16(1.0f + 0.00048828125f), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9: rounds up to even.
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0.00048828125f), 0x3c02);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(-std::numeric_limits<float>::signaling_NaN()))));
  EXPECT_EQ(f16_to_f32(0x7c00), INFINITY);
}

#if defined(__FLT16_MAX__) && defined(__GNUC__) && !defined(__clang__)
// The compiler's own _Float16 conversion rounds to nearest even: agree on a million floats.
TEST(DType, F16MatchesCompilerConversion) {
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) {
    float f = bits_float(rng());
    if (std::isnan(f)) continue;
    _Float16 h = static_cast<_Float16>(f);
    uint16_t expected;
    std::memcpy(&expected, &h, 2);
    ASSERT_EQ(f32_to_f16(f), expected) << f;
  }
}
#endif

TEST(DType, BF16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(bits_float(0x3f808000u)), 0x3f80);  // halfway, even below
  EXPECT_EQ(f32_to_bf16(bits_float(0x3f818000u)), 0x3f82);  // halfway, odd below: up
  EXPECT_EQ(f32_to_bf16(bits_float(0x3f808001u)), 0x3f81);  // above halfway
  EXPECT_EQ(f32_to_bf16(bits_float(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to Inf
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80);
  uint16_t nan = f32_to_bf16(bits_float(0x7f800001u));  // a NaN whose payload is in the low bits
  EXPECT_TRUE(std::isnan(bf16_to_f32(nan)));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(-std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f), h);
    }
  }
}

TEST(DType, BulkConversionMatchesScalar) {
  std::vector<float> src = {0.1f, -3.5f, 1e-6f, 70000.0f, -0.0f};
  std::vector<uint16_t> h(src.size());
  std::vector<float> back(src.size());
  convert_from_f32(h.data(), DType::f16, src.data(), src.size());
  convert_to_f32(back.data(), h.data(), DType::f16, src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(h[i], f32_to_f16(src[i]));
    EXPECT_EQ(float_bits(back[i]), float_bits(f16_to_f32(h[i])));
  }
  EXPECT_THROW(convert_from_f32(h.data(), DType::i32, src.data(), 1), Error);
}

// Quantizing matches the gguf package's Q8_0 (llama.cpp's rule) byte for byte on the blocks of
// tests/data/q8_0/blocks.txt (made by tests/data/make_q8_0_fixture.py): random normals, scaled
// values landing on .5, zeros, a scale below f16's range, values near f16's top.
TEST(DType, Q8_0QuantizesBitForBitLikeLlamaCpp) {
  std::ifstream in(std::string(MINFER_SOURCE_DIR) + "/tests/data/q8_0/blocks.txt");
  ASSERT_TRUE(in) << "tests/data/q8_0/blocks.txt is missing";
  std::string line;
  int n_blocks = 0;
  while (std::getline(in, line)) {
    size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    std::istringstream floats(line.substr(0, tab));
    std::vector<float> x;
    std::string word;
    while (floats >> word) x.push_back(bits_float(static_cast<uint32_t>(std::stoul(word, nullptr, 16))));
    ASSERT_EQ(x.size(), 32u);
    std::string expected_hex = line.substr(tab + 1);
    ASSERT_EQ(expected_hex.size(), 68u);
    BlockQ8 block;
    quantize_q8_0(&block, x.data(), 32);
    const auto* bytes = reinterpret_cast<const uint8_t*>(&block);
    for (int i = 0; i < 34; ++i) {
      unsigned expected = static_cast<unsigned>(std::stoul(expected_hex.substr(2 * i, 2), nullptr, 16));
      ASSERT_EQ(bytes[i], expected) << "block " << n_blocks << " byte " << i;
    }
    // Dequantizing gives d * q exactly.
    float back[32];
    dequantize_row(DType::q8_0, back, &block, 32);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(back[i], f16_to_f32(block.d) * block.q[i]);
    ++n_blocks;
  }
  EXPECT_EQ(n_blocks, 9);
}

TEST(DType, Q8_0SizesAndPartialBlocks) {
  EXPECT_EQ(dtype_block(DType::q8_0), 32);
  EXPECT_EQ(dtype_bytes(DType::q8_0, 64), 68u);
  EXPECT_EQ(dtype_bytes(DType::bf16, 3), 6u);
  EXPECT_THROW(dtype_bytes(DType::q8_0, 33), Error);
  EXPECT_THROW(dtype_bytes(DType::f32, ~uint64_t{0} / 2), Error);  // overflow
  EXPECT_EQ(parse_dtype("q8_0"), DType::q8_0);
  float x[33] = {};
  std::vector<uint8_t> out(34 * 2);
  EXPECT_THROW(convert_from_f32(out.data(), DType::q8_0, x, 33), Error);
}

}  // namespace
}  // namespace minfer
