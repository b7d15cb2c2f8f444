// The per-type pieces of the packed layout (kernels/cpu/quant/packed.h): how a type packs a group
// of 16 rows, unpacks one row back, and multiplies packed groups by activation rows. The driver
// (packed.cpp) owns threads, activations and the rows past the last group; each type's file
// (packed_legacy.cpp, packed_k.cpp) owns its layout, documented atop it with a drawing.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/quant/act_runs.h"
#include "kernels/cpu/quant/packed.h"
#include "kernels/cpu/quant/quant_gemm.h"

namespace minfer::cpu::packed {

// One call's activations as the kernels read them, per run of G codes of each row
// (kernels/cpu/quant/act_runs.h, the same arrays quant_gemm.cpp reads).
using Activations = cpu::Activations;

// One register tile: activation rows [m, m + rows) times the 16 * groups weight rows of `groups`
// consecutive packed groups, the first at w. out(r, j) for r < rows, j < 16 * groups, rows ld_out
// apart. rows is 1 to the type's max_rows, groups 1 to its max_groups (TypeKernels).
struct Tile {
  const uint8_t* w;
  int64_t group_bytes;  // 16 * the file's row bytes
  int groups;
  const Activations* a;
  int64_t m;
  int rows;
  int64_t K;
  float* out;
  int64_t ld_out;
};

struct TypeKernels {
  // 16 rows of nb blocks, the file's rows row_bytes apart at src, into one group at dst.
  void (*pack_group)(uint8_t* dst, const uint8_t* src, int64_t row_bytes, int64_t nb);
  // Row r (< 16) of the group at src back into the file's nb blocks at dst.
  void (*unpack_row)(uint8_t* dst, const uint8_t* group, int r, int64_t nb);
  void (*tile)(const Tile& t);
  int max_rows;    // of a Tile
  int max_groups;  // of a Tile
};

// A tile's groups one at a time and its rows 2 at a time, by register tiles of one group and 2
// rows (Pair) or 1 (Single): AVX2's tiles, whose 16 registers hold 2 rows.
template <void (*Pair)(const Tile&), void (*Single)(const Tile&)>
void rows_in_pairs(const Tile& t) {
  for (int n = 0; n < t.groups; ++n)
    for (int r = 0; r < t.rows; r += 2) {
      Tile part = t;
      part.w = t.w + n * t.group_bytes;
      part.groups = 1;
      part.m = t.m + r;
      part.rows = std::min(2, t.rows - r);
      part.out = t.out + r * t.ld_out + kPackRows * n;
      (part.rows == 2 ? Pair : Single)(part);
    }
}

// One group's codes and maps as columns 16n .. 16n + 15 of quant_gemm's strip (quant_gemm.h), for a
// group of K weights a row at `group`.
using UnpackToStrip = void (*)(const uint8_t* group, int64_t K, int n, const QuantStrip& strip);

// A tile's rows from its groups unpacked once into quant_gemm's strip (unpack, one call a group),
// then quant_gemm's register tiles over it (quant_strip_rows): for prefill, where one unpacking
// serves every row. Each element takes the operations packed.h's contract names, as the register
// tiles do. Defined by packed.cpp (AVX2 and up).
void strip_rows(const Tile& t, DType type, UnpackToStrip unpack);

// The kernels of type t in this build, or nullptr where t is not packed (packs(t) is false).
// Defined by the type files: legacy_kernels for q8_0, q4_0, q4_1, q5_0, q5_1; k_kernels for
// q2_k .. q6_k.
const TypeKernels* legacy_kernels(DType t);
const TypeKernels* k_kernels(DType t);

}  // namespace minfer::cpu::packed
