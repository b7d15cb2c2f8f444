#include "core/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/checked.h"
#include "core/error.h"
#include "core/quants.h"

namespace minfer {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::q8_0: return "q8_0";
    case DType::q4_0: return "q4_0";
    case DType::q4_1: return "q4_1";
    case DType::q5_0: return "q5_0";
    case DType::q5_1: return "q5_1";
    case DType::q2_k: return "q2_k";
    case DType::q3_k: return "q3_k";
    case DType::q4_k: return "q4_k";
    case DType::q5_k: return "q5_k";
    case DType::q6_k: return "q6_k";
  }
  return "?";
}

DType parse_dtype(const char* name) {
  for (int i = 0; i <= int(DType::q6_k); ++i)
    if (std::strcmp(name, dtype_name(DType(i))) == 0) return DType(i);
  fail("unknown dtype '", name, "' (expected f32, f16, bf16, i32, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k or q6_k)");
}

uint64_t dtype_bytes(DType t, uint64_t count) {
  const uint64_t block = uint64_t(dtype_block(t));
  if (count % block != 0) fail(count, " elements are not whole ", dtype_name(t), " blocks of ", block);
  return checked_mul(count / block, uint64_t(dtype_block_bytes(t)), "tensor bytes");
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
    case DType::q8_0: case DType::q4_0: case DType::q4_1: case DType::q5_0: case DType::q5_1:
      quantize_row(dst_type, dst, src, n);
      return;
    case DType::q2_k: case DType::q3_k: case DType::q4_k: case DType::q5_k: case DType::q6_k:
      fail("cannot convert f32 to ", dtype_name(dst_type), ": K-quants are read from GGUF files, not made");
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
    case DType::i32: fail("cannot convert i32 to f32");
    default: dequantize_row(src_type, dst, src, n); return;
  }
}

}  // namespace minfer
