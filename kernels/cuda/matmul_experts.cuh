// The expert product (kernels/ref/matmul_experts.h) on the device, its rows grouped by expert as
// the CPU's (kernels/cpu/matmul_experts.h):
//   1. group_slots: one warp sorts the slots by expert, stably (a counting sort): expert e's rows
//      are [first[e], first[e + 1]) in slot order, row[s] is slot s's row among them, and used
//      lists the experts with rows.
//   2. gather_slot_rows: xs[row[s], :] = x[s or s / k, :].
//   3. matvec_experts (matvec.cuh) over xs into ys: a grid row per expert used, so each chosen
//      expert's matrix is read from memory once a step for all its rows (in chunks of up to 8
//      rows; a chunk after the first re-reads it, likely from cache).
//   4. out[s, :] = ys[row[s], :], or with weights out[m, :] = sum over j, in j order, of
//      weights[m, j] * ys[row[m k + j], :].
// The host never reads ids or counts, so a CUDA graph can hold the step. A slot whose id names no
// expert (outside [0, E)) is placed nowhere: its out row is left unwritten, and with weights the
// sum leaves it out.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace minfer::cuda {

// The floats of scratch matmul_experts needs: xs (M k, K), ys (M k, N), and first, cursors, row,
// used and n_used as int32 (E + 1, E, M k, E, 1).
int64_t matmul_experts_scratch_floats(int64_t M, int64_t k, int64_t E, int64_t N, int64_t K);

void matmul_experts(cudaStream_t stream,
                    float* out, int64_t ld_out,                    // (M k, N), or (M, N) with weights
                    const float* x, int64_t ld_x, bool x_per_slot,  // (M k, K) or (M, K)
                    const void* w, DType w_dtype,                  // (E, N, K), dense
                    const int32_t* ids, const float* weights,      // (M, k) each, dense; weights may be null
                    float* scratch,                                // matmul_experts_scratch_floats floats
                    int64_t M, int64_t k, int64_t E, int64_t N, int64_t K);

}  // namespace minfer::cuda
