// The packed layout of the legacy types (q8_0, q4_0, q4_1, q5_0, q5_1): skeleton, no type yet.
#include "kernels/cpu/quant/packed_tile.h"

namespace minfer::cpu::packed {

const TypeKernels* legacy_kernels(DType) { return nullptr; }

}  // namespace minfer::cpu::packed
