// Quantized matrices repacked at load into groups of 16 rows, which one kernel multiplies for one
// activation row or many: the same weight bytes, the same arithmetic, so a row's result does not
// depend on how many rows share its product (decode, batched decode, prefill, a server's mixed step).
//
// Why a second layout: the file keeps each row's blocks together, which suits a dot product along
// one row (decode) but not a GEMM, whose vector lanes run across weight rows. Before this layout,
// decode summed along rows and prefill unpacked 32 rows into a strip on every call and summed across
// them (quant_gemm.cpp), in a different order, so a greedy token could flip with the batch.
//
// The contract every packed type keeps (kernels/cpu/quant/packed_tile.h holds the per-type kernels):
//   - bytes: a group of 16 rows occupies exactly the bytes of those 16 rows in the file, at the
//     same offset (group g at g * 16 * row_bytes); the bytes within it are rearranged (each type's
//     file draws how: moved, or a code's top bit flipped). The last N % 16 rows stay as the file
//     stores them. So a slice of rows that starts on a multiple of 16 is a packed matrix too, and
//     a matrix's size, its byte counts and its views do not change.
//   - arithmetic: every output element is the run-order sum that quant_gemm computes from the file's
//     rows, bit for bit: for each run g of G weights (G = 16 or 32, unpack::affine_run) in order,
//       S   = sum_k u[k] a[k] - shift * sum_k a[k]           (int32, exact)
//       acc = fma(float(S), dl * dx, acc)                     (dl * dx rounded to f32 first)
//       acc = fma(-ml, cx, acc)                               (the types with a minimum)
//     where u are the codes as unsigned bytes, a the activation codes of the run, dx their scale and
//     cx = dx * float(sum_k a[k]) (quant_gemm.cpp's header has the same terms).
//   - invariance: the operations that produce one output element are the same whatever the number of
//     activation rows and weight groups a kernel call covers.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/threads.h"

namespace minfer::cpu {

constexpr int64_t kPackRows = 16;  // weight rows per packed group

// Whether this build has a packed kernel for weights of type t (AVX-512 VNNI or AVX2 builds; the
// types whose per-type kernels are written: packed_tile.h lists them).
bool packs(DType t);

// Packs an (N, K) matrix of type t from the file's layout: src and dst are N rows of K / block
// blocks, dense, and do not overlap. Rows past the last whole group are copied as they are.
void pack_rows(DType t, void* dst, const void* src, int64_t N, int64_t K);

// Writes row `row` of a packed (N, K) matrix back in the file's layout: K / block blocks into
// dst_row. unpack_row(pack_rows(x)) is x, byte for byte.
void unpack_row(DType t, void* dst_row, const void* packed, int64_t row, int64_t N, int64_t K);

// out = x * w^T with w packed (pack_rows): every M from 1 up takes the same per-element arithmetic
// (see the top), so row m of out is the same whatever M is. Allocates nothing once its buffers
// have grown.
void matmul_packed(ThreadPool& pool,
                   float* out, int64_t ld_out,    // (M, N)
                   const float* x, int64_t ld_x,  // (M, K)
                   const void* w, DType t,        // (N, K / block) blocks, packed
                   int64_t M, int64_t N, int64_t K);

// The arithmetic of the top in plain C++, one output element at a time (std::fma), on a matrix in
// the file's layout (N rows, any N): what matmul_packed computes for the rows past the last whole
// group, and the oracle the packed kernels are tested against. Builds with AVX2 and up (it reads
// the codes through quant_unpack.h), for every quantized type.
void matmul_run_order(ThreadPool& pool,
                      float* out, int64_t ld_out,    // (M, N)
                      const float* x, int64_t ld_x,  // (M, K)
                      const void* w, DType t,        // (N, K / block) blocks, the file's layout
                      int64_t M, int64_t N, int64_t K);

}  // namespace minfer::cpu
