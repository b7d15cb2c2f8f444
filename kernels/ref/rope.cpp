#include "kernels/ref/rope.h"

#include <cmath>

namespace minfer::ref {

void rope_inv_freq_default(float* inv_freq, int64_t head_dim) {
  for (int64_t j = 0; j < head_dim / 2; ++j)
    inv_freq[j] = 1.0f / std::pow(10000.0f, static_cast<float>(2 * j) / static_cast<float>(head_dim));
}

void rope_table_row(float* row, int64_t position, const float* inv_freq, int64_t head_dim) {
  for (int64_t j = 0; j < head_dim / 2; ++j) {
    float angle = static_cast<float>(position) * inv_freq[j];
    row[2 * j + 0] = std::cos(angle);
    row[2 * j + 1] = std::sin(angle);
  }
}

void rope_table(float* table, int64_t n_ctx, const float* inv_freq, int64_t head_dim) {
  for (int64_t p = 0; p < n_ctx; ++p) rope_table_row(table + p * head_dim, p, inv_freq, head_dim);
}

void rope(float* x, int64_t ld_x, const int32_t* pos, const float* table, int64_t M,
          int64_t n_heads, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t h = 0; h < n_heads; ++h)
      for (int64_t j = 0; j < half; ++j) {
        float* pair = x + m * ld_x + h * head_dim + 2 * j;
        const float* cs = table + (int64_t(pos[m]) * half + j) * 2;
        double x0 = pair[0], x1 = pair[1], c = cs[0], s = cs[1];
        pair[0] = static_cast<float>(x0 * c - x1 * s);
        pair[1] = static_cast<float>(x0 * s + x1 * c);
      }
}

}  // namespace minfer::ref
