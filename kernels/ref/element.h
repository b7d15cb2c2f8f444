// Reading one element of any float or quantized dtype as a double, for the reference kernels.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quants.h"

namespace minfer::ref {

inline double load_element(const void* data, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(data)[index];
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(data)[index]);
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(data)[index]);
    case DType::i32: fail("reference kernels read float and quantized types, not i32");
    default: {  // a quantized type: its block, dequantized
      const int64_t block = dtype_block(dtype);
      float values[kQK];
      dequantize_row(dtype, values, static_cast<const char*>(data) + index / block * dtype_block_bytes(dtype),
                     static_cast<size_t>(block));
      return values[index % block];
    }
  }
}

inline void store_element(void* data, DType dtype, int64_t index, float value) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(data)[index] = value; return;
    case DType::f16: static_cast<uint16_t*>(data)[index] = f32_to_f16(value); return;
    case DType::bf16: static_cast<uint16_t*>(data)[index] = f32_to_bf16(value); return;
    default: break;  // a block's scales depend on all its elements: no element is stored alone
  }
  fail("reference kernels write f32, f16 or bf16, not ", dtype_name(dtype));
}

}  // namespace minfer::ref
