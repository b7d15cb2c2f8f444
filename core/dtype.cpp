#include "core/dtype.h"

#include <cstring>

#include "core/error.h"

namespace minfer {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
  }
  return "?";
}

DType parse_dtype(const char* name) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32})
    if (std::strcmp(name, dtype_name(t)) == 0) return t;
  fail("unknown dtype '", name, "' (expected f32, f16, bf16 or i32)");
}

void convert_from_f32(void* dst, DType dst_type, const float* src, size_t n) {
  switch (dst_type) {
    case DType::f32: std::memcpy(dst, src, n * 4); return;
    case DType::f16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::bf16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
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
    case DType::i32: break;
  }
  fail("cannot convert ", dtype_name(src_type), " to f32");
}

}  // namespace minfer
