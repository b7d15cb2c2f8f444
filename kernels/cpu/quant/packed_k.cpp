// The packed layout of the K-quants (q2_k .. q6_k): skeleton, no type yet.
#include "kernels/cpu/quant/packed_tile.h"

namespace minfer::cpu::packed {

const TypeKernels* k_kernels(DType) { return nullptr; }

}  // namespace minfer::cpu::packed
