#include "kernels/cpu/attention.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <vector>

namespace minfer::cpu {

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Rows = Eigen::Map<const RowMajor, 0, Eigen::OuterStride<>>;
using Vector = Eigen::Map<Eigen::VectorXf>;
using ConstVector = Eigen::Map<const Eigen::VectorXf>;

// Keys per block of the online variant: 64 scores live in registers and L1.
constexpr int64_t kKeyBlock = 64;

}  // namespace

template <bool Online>
void attention(ThreadPool& pool, float* out, int64_t ld_out, const float* q, int64_t ld_q,
               const float* k_cache, const float* v_cache, const int32_t* seq, const int32_t* pos,
               int64_t M, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t S) {
  const int64_t kv_dim = n_kv_heads * head_dim;
  const int64_t group = n_heads / n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  auto one_head = [&](int64_t task) {
    const int64_t m = task / n_heads, h = task % n_heads;
    const int64_t n_keys = int64_t(pos[m]) + 1;
    const int64_t offset = int64_t(seq[m]) * S * kv_dim + (h / group) * head_dim;
    ConstVector qh(q + m * ld_q + h * head_dim, head_dim);
    Vector oh(out + m * ld_out + h * head_dim, head_dim);
    // note: 64-byte aligned like every other buffer: Eigen's vectorised sums start with a scalar
    // prologue up to the first aligned element, so a buffer whose alignment differed from thread
    // to thread would make the result depend on which thread ran the task.
    thread_local std::vector<float, Eigen::aligned_allocator<float>> scratch;  // grows once
    if (!Online) {
      scratch.resize(static_cast<size_t>(n_keys));
      Vector score(scratch.data(), n_keys);
      Rows keys(k_cache + offset, n_keys, head_dim, Eigen::OuterStride<>(kv_dim));
      Rows values(v_cache + offset, n_keys, head_dim, Eigen::OuterStride<>(kv_dim));
      score.noalias() = (keys * qh) * scale;
      float max_score = score.maxCoeff();
      score = (score.array() - max_score).exp().matrix();
      score /= score.sum();
      oh.noalias() = values.transpose() * score;
    } else {
      scratch.resize(static_cast<size_t>(kKeyBlock));
      float running_max = -INFINITY, running_sum = 0.0f;
      oh.setZero();
      for (int64_t t0 = 0; t0 < n_keys; t0 += kKeyBlock) {
        const int64_t n = std::min(kKeyBlock, n_keys - t0);
        Vector score(scratch.data(), n);
        Rows keys(k_cache + offset + t0 * kv_dim, n, head_dim, Eigen::OuterStride<>(kv_dim));
        Rows values(v_cache + offset + t0 * kv_dim, n, head_dim, Eigen::OuterStride<>(kv_dim));
        score.noalias() = (keys * qh) * scale;
        float new_max = std::max(running_max, score.maxCoeff());
        float correction = std::exp(running_max - new_max);  // 0 on the first block
        score = (score.array() - new_max).exp().matrix();
        running_sum = running_sum * correction + score.sum();
        oh = oh * correction;
        oh.noalias() += values.transpose() * score;
        running_max = new_max;
      }
      oh /= running_sum;
    }
  };
  const int64_t tasks = M * n_heads;
  if (pool.size() == 1 || tasks == 1) {
    for (int64_t t = 0; t < tasks; ++t) one_head(t);
  } else {
    pool.parallel_for(tasks, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) one_head(t);
    });
  }
}

template void attention<false>(ThreadPool&, float*, int64_t, const float*, int64_t, const float*,
                               const float*, const int32_t*, const int32_t*, int64_t, int64_t,
                               int64_t, int64_t, int64_t);
template void attention<true>(ThreadPool&, float*, int64_t, const float*, int64_t, const float*,
                              const float*, const int32_t*, const int32_t*, int64_t, int64_t,
                              int64_t, int64_t, int64_t);

}  // namespace minfer::cpu
