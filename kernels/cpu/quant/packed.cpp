// The driver of the packed layout (kernels/cpu/quant/packed.h). Skeleton: the kernels arrive type
// by type (packed_legacy.cpp, packed_k.cpp); until a type has them, packs() is false for it.
#include "kernels/cpu/quant/packed.h"

#include "core/error.h"
#include "kernels/cpu/quant/packed_tile.h"

namespace minfer::cpu {

namespace {
const packed::TypeKernels* kernels_for(DType t) {
  if (!is_quantized(t)) return nullptr;
  return is_k_quant(t) ? packed::k_kernels(t) : packed::legacy_kernels(t);
}
}  // namespace

bool packs(DType t) { return kernels_for(t) != nullptr; }

void pack_rows(DType t, void*, const void*, int64_t, int64_t) {
  MINFER_CHECK(packs(t), "pack_rows: no packed layout for ", dtype_name(t));
}

void unpack_row(DType t, void*, const void*, int64_t, int64_t, int64_t) {
  MINFER_CHECK(packs(t), "unpack_row: no packed layout for ", dtype_name(t));
}

void matmul_packed(ThreadPool&, float*, int64_t, const float*, int64_t, const void*, DType t, int64_t, int64_t,
                   int64_t) {
  MINFER_CHECK(packs(t), "matmul_packed: no packed layout for ", dtype_name(t));
}

}  // namespace minfer::cpu
