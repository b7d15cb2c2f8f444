#include "kernels/ref/attention.h"

#include <cmath>
#include <vector>

#include "kernels/ref/element.h"
#include "kernels/ref/kv_store.h"

namespace minfer {

float AttentionSpec::score_scale() const {
  return scale > 0.0f ? scale : static_cast<float>(1.0 / std::sqrt(double(head_dim)));
}

}  // namespace minfer

namespace minfer::ref {

void attention(float* out, int64_t ld_out, const float* q, int64_t ld_q, const void* k_cache,
               const void* v_cache, DType cache_dtype, const KvBlockTable& table, const int32_t* seq,
               const int32_t* pos, int64_t M, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale,
               int64_t window) {
  const int64_t group = n_heads / n_kv_heads;
  std::vector<double> score;
  for (int64_t m = 0; m < M; ++m) {
    const int64_t first = attention_first_key(pos[m], window), n_keys = int64_t(pos[m]) + 1 - first;
    score.assign(static_cast<size_t>(n_keys), 0.0);
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* qh = q + m * ld_q + h * head_dim;
      auto at = [&](int64_t t) { return kv_cache_offset(table, seq[m], h / group, first + t, n_kv_heads, head_dim); };
      double max_score = -INFINITY;
      for (int64_t t = 0; t < n_keys; ++t) {
        double dot = 0.0;
        for (int64_t i = 0; i < head_dim; ++i)
          dot += double(qh[i]) * load_element(k_cache, cache_dtype, at(t) + i);
        score[t] = dot * double(scale);
        if (score[t] > max_score) max_score = score[t];
      }
      double total = 0.0;
      for (int64_t t = 0; t < n_keys; ++t) total += (score[t] = std::exp(score[t] - max_score));
      for (int64_t i = 0; i < head_dim; ++i) {
        double acc = 0.0;
        for (int64_t t = 0; t < n_keys; ++t)
          acc += score[t] * load_element(v_cache, cache_dtype, at(t) + i);
        out[m * ld_out + h * head_dim + i] = static_cast<float>(acc / total);
      }
    }
  }
}

}  // namespace minfer::ref
