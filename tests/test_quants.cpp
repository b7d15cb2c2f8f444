// ggml's quantized blocks (core/quants.h) against the `gguf` Python package, bit for bit:
// dequantize_row for every quantized type and quantize_row for the legacy ones, on the blocks of
// tests/data/quants/dequantize.bin and quantize.bin (made by tests/data/quants/make_quant_fixtures.py,
// which lists the edge cases they cover).
//
// Both files are a sequence of sections, all integers little-endian:
//   char name[8] (minfer's type name, NUL-padded), uint32 block_size, uint32 type_size (gguf's
//   GGML_QUANT_SIZES), uint32 n_blocks, then n_blocks records:
//     dequantize.bin: type_size bytes of a block, then block_size float32 (gguf's dequantize)
//     quantize.bin:   block_size float32 inputs, then type_size bytes (gguf's quantize)
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quants.h"

namespace minfer {
namespace {

struct Section {
  std::string name;
  uint32_t block_size = 0, type_size = 0, n_blocks = 0;
  std::vector<uint8_t> blocks;   // n_blocks * type_size
  std::vector<uint32_t> floats;  // n_blocks * block_size float32 bit patterns
};

class Reader {
 public:
  explicit Reader(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  bool done() const { return pos_ == bytes_.size(); }
  bool has(size_t n) const { return bytes_.size() - pos_ >= n; }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(bytes_[pos_ + i]) << (8 * i);
    pos_ += 4;
    return v;
  }
  std::string name() {
    std::string s(reinterpret_cast<const char*>(&bytes_[pos_]), 8);
    pos_ += 8;
    return s.substr(0, s.find('\0'));
  }
  void append_bytes(std::vector<uint8_t>& out, size_t n) {
    out.insert(out.end(), bytes_.begin() + long(pos_), bytes_.begin() + long(pos_ + n));
    pos_ += n;
  }
  void append_floats(std::vector<uint32_t>& out, size_t n) {
    for (size_t i = 0; i < n; ++i) out.push_back(u32());
  }

 private:
  std::vector<uint8_t> bytes_;
  size_t pos_ = 0;
};

Section read_section(Reader& r, const std::string& path, bool floats_first) {
  if (!r.has(20)) fail(path, ": truncated section header");
  Section s;
  s.name = r.name();
  s.block_size = r.u32();
  s.type_size = r.u32();
  s.n_blocks = r.u32();
  const size_t record = s.type_size + 4 * size_t(s.block_size);
  if (!r.has(s.n_blocks * record)) fail(path, ": section ", s.name, " is truncated");
  for (uint32_t b = 0; b < s.n_blocks; ++b) {
    if (floats_first) r.append_floats(s.floats, s.block_size);
    r.append_bytes(s.blocks, s.type_size);
    if (!floats_first) r.append_floats(s.floats, s.block_size);
  }
  return s;
}

// Reads one fixture file; floats_first: records hold the floats before the block (quantize.bin).
std::vector<Section> read_sections(const std::string& file, bool floats_first) {
  const std::string path = std::string(MINFER_SOURCE_DIR) + "/tests/data/quants/" + file;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, " is missing: run tests/data/quants/make_quant_fixtures.py");
  Reader r(std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {}));
  std::vector<Section> sections;
  while (!r.done()) sections.push_back(read_section(r, path, floats_first));
  return sections;
}

std::set<std::string> names(const std::vector<Section>& sections) {
  std::set<std::string> out;
  for (const Section& s : sections) out.insert(s.name);
  return out;
}

// A section's block and type sizes (gguf's GGML_QUANT_SIZES) are minfer's.
void expect_sizes(const Section& s) {
  SCOPED_TRACE(s.name);
  const DType t = parse_dtype(s.name.c_str());
  EXPECT_TRUE(is_quantized(t));
  EXPECT_EQ(dtype_block(t), int64_t(s.block_size));
  EXPECT_EQ(dtype_block_bytes(t), int64_t(s.type_size));
}

TEST(Quants, FixtureSizesMatchGgufPackage) {
  const auto dequantize = read_sections("dequantize.bin", false);
  const auto quantize = read_sections("quantize.bin", true);
  EXPECT_EQ(names(dequantize), (std::set<std::string>{"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k",
                                                       "q4_k", "q5_k", "q6_k"}));
  EXPECT_EQ(names(quantize), (std::set<std::string>{"q8_0", "q4_0", "q4_1", "q5_0", "q5_1"}));
  for (const Section& s : dequantize) expect_sizes(s);
  for (const Section& s : quantize) expect_sizes(s);
}

std::string hex32(uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}
std::string hex8(uint8_t v) {
  char buf[5];
  std::snprintf(buf, sizeof buf, "0x%02x", v);
  return buf;
}

// One failure per block at most: its first weight whose float32 bits differ.
void expect_same_floats(const uint32_t* want, const float* got, uint32_t n) {
  for (uint32_t j = 0; j < n; ++j) {
    if (float_bits(got[j]) == want[j]) continue;
    ADD_FAILURE() << "weight " << j << ": gguf " << bits_float(want[j]) << " (" << hex32(want[j]) << "), minfer "
                  << got[j] << " (" << hex32(float_bits(got[j])) << ")";
    return;
  }
}

TEST(Quants, DequantizeMatchesGgufPackage) {
  for (const Section& s : read_sections("dequantize.bin", false)) {
    const DType t = parse_dtype(s.name.c_str());
    ASSERT_EQ(dtype_block_bytes(t), int64_t(s.type_size)) << s.name;
    std::vector<float> out(s.floats.size());
    dequantize_row(t, out.data(), s.blocks.data(), out.size());  // all blocks in one row
    for (uint32_t b = 0; b < s.n_blocks; ++b) {
      SCOPED_TRACE(s.name + " block " + std::to_string(b));
      expect_same_floats(&s.floats[size_t(b) * s.block_size], &out[size_t(b) * s.block_size], s.block_size);
    }
  }
}

// One failure per block at most: its first byte that differs.
void expect_same_bytes(const uint8_t* want, const uint8_t* got, uint32_t n) {
  for (uint32_t j = 0; j < n; ++j) {
    if (got[j] == want[j]) continue;
    ADD_FAILURE() << "byte " << j << ": gguf " << hex8(want[j]) << ", minfer " << hex8(got[j]);
    return;
  }
}

TEST(Quants, QuantizeMatchesGgufPackage) {
  for (const Section& s : read_sections("quantize.bin", true)) {
    const DType t = parse_dtype(s.name.c_str());
    ASSERT_EQ(dtype_block_bytes(t), int64_t(s.type_size)) << s.name;
    std::vector<float> in(s.floats.size());
    for (size_t i = 0; i < in.size(); ++i) in[i] = bits_float(s.floats[i]);
    std::vector<uint8_t> out(s.blocks.size());
    quantize_row(t, out.data(), in.data(), in.size());  // all blocks in one row
    for (uint32_t b = 0; b < s.n_blocks; ++b) {
      SCOPED_TRACE(s.name + " block " + std::to_string(b));
      expect_same_bytes(&s.blocks[size_t(b) * s.type_size], &out[size_t(b) * s.type_size], s.type_size);
    }
  }
}

TEST(Quants, QuantizeRefusesKQuants) {
  std::vector<float> x(kQK, 0.5f);
  std::vector<uint8_t> out(1024);
  for (DType t : {DType::q2_k, DType::q3_k, DType::q4_k, DType::q5_k, DType::q6_k}) {
    SCOPED_TRACE(dtype_name(t));
    EXPECT_THROW(quantize_row(t, out.data(), x.data(), x.size()), Error);
  }
}


// The CUDA kernels run the same per-block code (core/quants_blocks.h) with __fmul_rn/__fadd_rn,
// and the host runs it unfused (-ffp-contract=off); both agree with the host only if no
// evaluation order can matter. It cannot if every product is exact in float32, so that each
// weight is its exact value rounded once: this holds the host's dequantization to that, on random
// blocks with random finite f16 scales (subnormal to 65504), evaluating each weight from the
// layouts of core/quants.h in double (every term and their difference are exact there: at most
// 51 bits between 2^27 and 2^-24).
template <class Block>
Block random_block(std::mt19937& rng) {
  uint8_t bytes[sizeof(Block)];
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  Block block;
  std::memcpy(&block, bytes, sizeof(Block));
  return block;
}
uint16_t random_finite_f16(std::mt19937& rng) {
  const auto h = static_cast<uint16_t>(rng());
  return ((h >> 10) & 0x1f) == 0x1f ? static_cast<uint16_t>(h & ~0x4000u) : h;  // no Inf or NaN
}
int nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }
int fifth(const uint8_t* qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }
double k_low2(const uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3; }
double h(uint16_t bits) { return double(f16_to_f32(bits)); }

template <class Block, class Exact>
void expect_rounded_once(DType t, int weights, Exact exact) {
  std::mt19937 rng(uint32_t(t) * 7919u);
  std::vector<float> y(static_cast<size_t>(weights));
  for (int n = 0; n < 2000; ++n) {
    Block b = random_block<Block>(rng);
    b.d = random_finite_f16(rng);
    if constexpr (std::is_same_v<Block, BlockQ4_1> || std::is_same_v<Block, BlockQ5_1>) b.m = random_finite_f16(rng);
    if constexpr (std::is_same_v<Block, BlockQ2_K> || std::is_same_v<Block, BlockQ4_K> ||
                  std::is_same_v<Block, BlockQ5_K>)
      b.dmin = random_finite_f16(rng);
    dequantize_row(t, y.data(), &b, y.size());
    for (int e = 0; e < weights; ++e) {
      const float want = static_cast<float>(exact(b, e));
      ASSERT_EQ(float_bits(y[size_t(e)]), float_bits(want)) << dtype_name(t) << " block " << n << " weight " << e
                                                          << ": " << y[size_t(e)] << " vs " << want;
    }
  }
}

TEST(Quants, DequantizationIsTheExactValueRoundedOnce) {
  expect_rounded_once<BlockQ8>(DType::q8_0, 32, [](const BlockQ8& b, int e) { return h(b.d) * b.q[e]; });
  expect_rounded_once<BlockQ4_0>(DType::q4_0, 32, [](const BlockQ4_0& b, int e) { return h(b.d) * (nibble(b.qs, e) - 8); });
  expect_rounded_once<BlockQ4_1>(DType::q4_1, 32,
                                 [](const BlockQ4_1& b, int e) { return h(b.d) * nibble(b.qs, e) + h(b.m); });
  expect_rounded_once<BlockQ5_0>(DType::q5_0, 32, [](const BlockQ5_0& b, int e) {
    return h(b.d) * ((nibble(b.qs, e) | (fifth(b.qh, e) << 4)) - 16);
  });
  expect_rounded_once<BlockQ5_1>(DType::q5_1, 32, [](const BlockQ5_1& b, int e) {
    return h(b.d) * (nibble(b.qs, e) | (fifth(b.qh, e) << 4)) + h(b.m);
  });
  expect_rounded_once<BlockQ2_K>(DType::q2_k, kQK, [](const BlockQ2_K& b, int e) {
    const int sc = b.scales[e / 16];
    return h(b.d) * (sc & 0xF) * k_low2(b.qs, e) - h(b.dmin) * (sc >> 4);
  });
  expect_rounded_once<BlockQ3_K>(DType::q3_k, kQK, [](const BlockQ3_K& b, int e) {
    const int high = (b.hmask[e % 32] >> (e / 32)) & 1;
    return h(b.d) * q3_k_scale(b.scales, e / 16) * (k_low2(b.qs, e) - (high ? 0 : 4));
  });
  const auto q45 = [](const auto& b, const uint8_t* qh, int e) {
    const int j = e / 32, l = e % 32;
    uint8_t sc, m;
    k_scale_min(b.scales, j, &sc, &m);
    int q = (b.qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
    if (qh != nullptr) q |= ((qh[l] >> j) & 1) << 4;
    return h(b.d) * sc * q - h(b.dmin) * m;
  };
  expect_rounded_once<BlockQ4_K>(DType::q4_k, kQK, [&](const BlockQ4_K& b, int e) { return q45(b, nullptr, e); });
  expect_rounded_once<BlockQ5_K>(DType::q5_k, kQK, [&](const BlockQ5_K& b, int e) { return q45(b, b.qh, e); });
  expect_rounded_once<BlockQ6_K>(DType::q6_k, kQK, [](const BlockQ6_K& b, int e) {
    const int r = e % 128, hb = e / 128;
    const int low = (b.ql[64 * hb + r % 64] >> (4 * (r / 64))) & 0xF;
    const int high = (b.qh[32 * hb + r % 32] >> (2 * (r / 32))) & 3;
    return h(b.d) * b.scales[e / 16] * ((low | (high << 4)) - 32);
  });
}

}  // namespace
}  // namespace minfer
