// Element types and host-side conversions between float32, the two 16-bit float formats and
// llama.cpp's 8-bit blocks.
//
// f16 (IEEE binary16): 1 sign, 5 exponent, 10 mantissa bits; max 65504, subnormals down to 2^-24.
// bf16 (bfloat16):     1 sign, 8 exponent,  7 mantissa bits; the top half of a float32.
// Both conversions from f32 round to nearest, ties to even, keep NaN a NaN (quiet, sign kept) and
// keep +-Inf. These are the host versions: the CUDA kernels use the hardware intrinsics, and the
// CPU kernels use F16C / AVX-512 instructions where the build enables them.
//
// The quantized types (q8_0, q4_0, ..., q6_k) are ggml's blocks: core/quants.h says what each holds.
// A quantized tensor's rows are whole blocks: its last dimension is a multiple of the block size.
#pragma once

#include <cstdint>
#include <cstring>

namespace minfer {

enum class DType : uint8_t { f32, f16, bf16, i32, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k };

constexpr bool is_quantized(DType t) { return t >= DType::q8_0; }
constexpr bool is_k_quant(DType t) { return t >= DType::q2_k; }
// Elements per block: 1 for plain types, 32 for the legacy quantized types, 256 for K-quants.
constexpr int64_t dtype_block(DType t) { return !is_quantized(t) ? 1 : is_k_quant(t) ? 256 : 32; }
// Bytes per block (per element for plain types).
constexpr int64_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::f16: case DType::bf16: return 2;
    case DType::f32: case DType::i32: return 4;
    case DType::q8_0: return 34;
    case DType::q4_0: return 18;
    case DType::q4_1: return 20;
    case DType::q5_0: return 22;
    case DType::q5_1: return 24;
    case DType::q2_k: return 84;
    case DType::q3_k: return 110;
    case DType::q4_k: return 144;
    case DType::q5_k: return 176;
    case DType::q6_k: return 210;
  }
  return 0;
}
// Bytes per element of any type, as a fraction: 4, 2, 34 / 32 = 1.0625 for q8_0, ...
constexpr double dtype_bytes_per_element(DType t) { return double(dtype_block_bytes(t)) / double(dtype_block(t)); }
// The bytes of `count` elements (a whole number of blocks; Error otherwise).
uint64_t dtype_bytes(DType t, uint64_t count);

// One block of ggml's Q8_0 (the other blocks are in core/quants.h).
struct BlockQ8 {
  uint16_t d;     // f16 scale
  int8_t q[32];
};
static_assert(sizeof(BlockQ8) == 34, "a Q8_0 block is 34 bytes");
const char* dtype_name(DType t);
// Parses "f32", "f16", "bf16", "i32", "q8_0", "q4_0", ..., "q6_k"; throws Error naming the
// accepted values otherwise.
DType parse_dtype(const char* name);

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_f32(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // NaN
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);  // ties to even; overflow carries into Inf
  return static_cast<uint16_t>((x + rounding) >> 16);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // Inf, NaN
  if (exponent == 0) {
    // zero or subnormal: mantissa * 2^-24, exact in float32
    float v = static_cast<float>(mantissa) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t f32_to_f16(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) {  // Inf or NaN; a NaN keeps its top payload bits and is made quiet
    if (x > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to Inf
  if (x < 0x38800000u) {  // below 2^-14: a half subnormal or zero
    if (x < 0x33000000u) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to zero
    uint32_t exponent = x >> 23;                               // 102 .. 112
    uint32_t mantissa = (x & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exponent;  // value in units of 2^-24 is mantissa >> shift
    uint32_t h = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (h & 1u))) ++h;  // may carry into the smallest normal
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (((x >> 23) - 112u) << 10) | ((x >> 13) & 0x3ffu);
  uint32_t rest = x & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
  return static_cast<uint16_t>(sign | h);
}

// Converts n elements from f32 to f32, f16, bf16 or a legacy quantized type, and from any type
// but i32 to f32 (n whole blocks for a quantized type).
void convert_from_f32(void* dst, DType dst_type, const float* src, size_t n);
void convert_to_f32(float* dst, const void* src, DType src_type, size_t n);

}  // namespace minfer
