// Helpers for checking backend ops against the plain-loop references (kernels/ref/), in the style
// of llama.cpp's test-backend-ops: random inputs, outputs surrounded by guard bytes, comparison by
// normalised mean squared error, NaN/Inf rejected.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "core/tensor.h"

namespace minfer::test {

// Host memory for expected values and staging.
CachingPool& host_pool();
Tensor host_tensor(const std::vector<int64_t>& shape, DType dtype);
Tensor host_random(const std::vector<int64_t>& shape, std::mt19937& rng, float lo = -1.0f,
                   float hi = 1.0f, DType dtype = DType::f32);
// n_blocks random blocks of a K-quant type: random codes and sub-scales, f16 scales in +-max_scale.
void random_k_quant_blocks(void* data, DType dtype, int64_t n_blocks, std::mt19937& rng, float max_scale = 0.01f);
// A copy of a host tensor on the backend's device (contiguous).
Tensor to_backend(Backend& backend, const Tensor& host);
// A contiguous host copy of any tensor.
Tensor to_host(const Tensor& t);

// The backends the harness knows: "cpu", "cuda", and "cuda-naive" / "cuda-tiled" / "cuda-mma" for
// the hand-written CUDA matrix products. Returns nullptr with `reason` set when unavailable.
Backend* backend_by_name(const std::string& name, std::string* reason);

// A 2-D f32 or i32 output of (rows, cols) with row stride ld >= cols, inside a buffer that has
// guard words before and after it, and the gaps between rows, filled with a sentinel pattern.
// check() verifies that nothing outside the view was written, and returns the view's values.
class GuardedOutput {
 public:
  GuardedOutput(Backend& backend, int64_t rows, int64_t cols, int64_t ld,
                DType dtype = DType::f32);
  // Starts from these values instead of garbage (for in-place ops and caches).
  void fill(const Tensor& host_values);
  const Tensor& view() const { return view_; }
  // The view's values as a contiguous host tensor, after checking the guards.
  Tensor check(const std::string& label) const;

 private:
  static constexpr int64_t kGuard = 64;
  static constexpr uint32_t kSentinel = 0x7fa5a5a5u;  // a NaN no kernel produces
  Tensor buffer_, view_;
  int64_t rows_, cols_, ld_;
};

// Normalised mean squared error sum((e - a)^2) / sum(e^2) (absolute when e is all zero).
double nmse(const Tensor& expected, const Tensor& actual);
// Fails the test with the NMSE, the largest differences and their places when
// nmse > limit, when the shapes differ, or when `actual` holds a NaN or Inf.
void expect_close(const Tensor& expected, const Tensor& actual, double limit,
                  const std::string& label);

}  // namespace minfer::test
