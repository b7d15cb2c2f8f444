// Reading one element of any float dtype as a double, for the reference kernels.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"

namespace minfer::ref {

inline double load_element(const void* data, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(data)[index];
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(data)[index]);
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(data)[index]);
    case DType::q8_0: {  // the block's scale times the element's int8
      const BlockQ8& b = static_cast<const BlockQ8*>(data)[index / 32];
      return double(f16_to_f32(b.d)) * double(b.q[index % 32]);
    }
    case DType::i32: break;
  }
  fail("reference kernels read f32, f16, bf16 or q8_0, not ", dtype_name(dtype));
}

inline void store_element(void* data, DType dtype, int64_t index, float value) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(data)[index] = value; return;
    case DType::f16: static_cast<uint16_t*>(data)[index] = f32_to_f16(value); return;
    case DType::bf16: static_cast<uint16_t*>(data)[index] = f32_to_bf16(value); return;
    case DType::q8_0:  // a block's scale depends on all 32 elements: no element is stored alone
    case DType::i32: break;
  }
  fail("reference kernels write f32, f16 or bf16, not ", dtype_name(dtype));
}

}  // namespace minfer::ref
