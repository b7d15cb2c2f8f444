#include "kernels/cpu/rmsnorm.h"

#include <Eigen/Core>
#include <cmath>

#include "kernels/cpu/parallel.h"

namespace minfer::cpu {

namespace {

using ConstRow = Eigen::Map<const Eigen::ArrayXf>;
using Row = Eigen::Map<Eigen::ArrayXf>;

// The shared body: each of the M x groups runs of D values (run r: row r / groups, the (r %
// groups)-th D of it); with Residual, x += delta first (the fused variant, groups = 1).
template <bool Residual>
void rmsnorm_rows(ThreadPool& pool, float* x, int64_t ld_x, const float* delta, int64_t ld_delta,
                  float* out, int64_t ld_out, const float* weight, int64_t M, int64_t D,
                  float eps, int64_t groups) {
  ConstRow w(weight, D);
  for_rows(pool, M * groups, D, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t m = r / groups, at = (r % groups) * D;
      Row xr(x + m * ld_x + at, D);
      if constexpr (Residual) xr += ConstRow(delta + m * ld_delta, D);
      float mean_square = xr.square().sum() / static_cast<float>(D);
      float scale = 1.0f / std::sqrt(mean_square + eps);
      Row(out + m * ld_out + at, D) = w * (scale * xr);
    }
  });
}

}  // namespace

void rmsnorm(ThreadPool& pool, float* out, int64_t ld_out, const float* x, int64_t ld_x,
             const float* weight, int64_t M, int64_t D, float eps, int64_t groups) {
  // x is only read on this path; the cast lets both variants share one body.
  rmsnorm_rows<false>(pool, const_cast<float*>(x), ld_x, nullptr, 0, out, ld_out, weight, M, D, eps, groups);
}

void residual_rmsnorm(ThreadPool& pool, float* out, int64_t ld_out, float* x, int64_t ld_x,
                      const float* delta, int64_t ld_delta, const float* weight, int64_t M,
                      int64_t D, float eps) {
  rmsnorm_rows<true>(pool, x, ld_x, delta, ld_delta, out, ld_out, weight, M, D, eps, 1);
}

}  // namespace minfer::cpu
