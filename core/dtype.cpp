#include "core/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/checked.h"
#include "core/error.h"

namespace minfer {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::q8_0: return "q8_0";
  }
  return "?";
}

DType parse_dtype(const char* name) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::q8_0})
    if (std::strcmp(name, dtype_name(t)) == 0) return t;
  fail("unknown dtype '", name, "' (expected f32, f16, bf16, q8_0 or i32)");
}

uint64_t dtype_bytes(DType t, uint64_t count) {
  const uint64_t block = uint64_t(dtype_block(t));
  if (count % block != 0) fail(count, " elements are not whole ", dtype_name(t), " blocks of ", block);
  return checked_mul(count / block, uint64_t(dtype_block_bytes(t)), "tensor bytes");
}

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

void dequantize_q8_0(float* dst, const BlockQ8* src, size_t n) {
  for (size_t b = 0; b < n / 32; ++b) {
    const float d = f16_to_f32(src[b].d);
    for (int j = 0; j < 32; ++j) dst[b * 32 + j] = d * static_cast<float>(src[b].q[j]);
  }
}

void convert_from_f32(void* dst, DType dst_type, const float* src, size_t n) {
  switch (dst_type) {
    case DType::f32: std::memcpy(dst, src, n * 4); return;
    case DType::f16: {
      auto* d = static_cast<uint16_t*>(dst);
      size_t i = 0;
#if defined(__F16C__)
      // vcvtps2ph rounds to nearest even, bit for bit as f32_to_f16 (the KV cache stores rows this way)
      for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
      for (; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::bf16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::q8_0:
      MINFER_CHECK(n % 32 == 0, "q8_0: ", n, " elements are not whole blocks of 32");
      quantize_q8_0(static_cast<BlockQ8*>(dst), src, n);
      return;
    case DType::i32: break;
  }
  fail("cannot convert f32 to ", dtype_name(dst_type));
}

void convert_to_f32(float* dst, const void* src, DType src_type, size_t n) {
  switch (src_type) {
    case DType::f32: std::memcpy(dst, src, n * 4); return;
    case DType::f16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::bf16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::q8_0:
      MINFER_CHECK(n % 32 == 0, "q8_0: ", n, " elements are not whole blocks of 32");
      dequantize_q8_0(dst, static_cast<const BlockQ8*>(src), n);
      return;
    case DType::i32: break;
  }
  fail("cannot convert ", dtype_name(src_type), " to f32");
}

}  // namespace minfer
