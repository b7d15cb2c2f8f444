#pragma once

#include <cstdint>

namespace minfer::ref {

// The rotation table of rotary position embeddings, computed once per model exactly as run.c
// computes it at every step (in float): for position p and pair j of a head,
//   table[p, j] = (cos(p * inv_freq[j]), sin(p * inv_freq[j]))
// with inv_freq[j] = 1 / theta^(2j / head_dim), possibly scaled (model/llama_config.h says how).
// Every backend reads this one table, so all of them rotate by identical angles.
void rope_table(float* table,            // (n_ctx, head_dim / 2, 2)
                int64_t n_ctx,
                const float* inv_freq,   // (head_dim / 2)
                int64_t head_dim);
// One position's row of that table.
void rope_table_row(float* row,          // (head_dim / 2, 2)
                    int64_t position, const float* inv_freq, int64_t head_dim);
// llama2.c's frequencies, theta = 10000 and no scaling, as run.c computes them in float.
void rope_inv_freq_default(float* inv_freq,  // (head_dim / 2)
                           int64_t head_dim);

// Rotates each consecutive pair (x0, x1) of every head of row m by the angle of position pos[m]:
//   (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos)      (llama2.c's interleaved pairs)
void rope(float* x, int64_t ld_x,      // (M, n_heads * head_dim), rotated in place
          const int32_t* pos,          // (M)
          const float* table,          // (n_ctx, head_dim / 2, 2)
          int64_t M, int64_t n_heads, int64_t head_dim);

}  // namespace minfer::ref
