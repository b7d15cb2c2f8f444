// The two ceilings of a roofline, measured on the machine at hand rather than taken from a data
// sheet: the memory read bandwidth (a streaming read over a buffer much larger than the last
// level of cache, through the backend's `sum` op) and the matrix-multiply peak (a large square
// product through the backend's `matmul`, in the dtype of interest). Decode is judged against
// the first, prefill against the second. `minfer bench --roofline` and `minfer demo roofline`
// both use this code.
#pragma once

#include <cstdint>
#include <string>

#include "engine/backend.h"

namespace minfer {

// note: each ceiling is the best repetition, as STREAM reports bandwidth: a ceiling is what the
// machine can do, and on a shared machine the slower repetitions measure the neighbours. The
// bench's own figures are means, so a row's fraction of the ceiling is, if anything, modest.
struct Roofline {
  double read_gbps = 0.0;     // best repetition
  double peak_gflops = 0.0;   // best repetition
  DType dtype = DType::f32;   // of the product's weights
  uint64_t buffer_bytes = 0;  // streamed per bandwidth repetition
  int64_t gemm_size = 0;      // the product is (n x n) times (n x n)^T
  std::string describe() const;  // one line for the bench header
};

// Streams a buffer of `bytes` bytes `reps` times; returns the best GB/s (1e9 bytes/s).
double measure_read_bandwidth(Backend& backend, uint64_t bytes, int reps);
// Multiplies (n x n) by (n x n)^T `reps` times; returns the best GFLOP/s (2 n^3 per product).
double measure_matmul_gflops(Backend& backend, int64_t n, DType dtype, int reps);
// Both, with sizes chosen for the device (CPU: 1 GiB and n = 2048; CUDA: 2 GiB and n = 8192).
Roofline measure_roofline(Backend& backend, DType dtype);

}  // namespace minfer
