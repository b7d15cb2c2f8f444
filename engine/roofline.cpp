#include "engine/roofline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/error.h"

namespace minfer {

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

double measure_read_bandwidth(Backend& backend, uint64_t bytes, int reps) {
  const int64_t n = static_cast<int64_t>(bytes / 4);
  Tensor buffer = backend.empty({n}, DType::f32);
  Tensor out = backend.empty({1}, DType::f32);
  backend.fill_uniform(buffer, 1, -1.0f, 1.0f);  // touch every page before timing
  backend.sum(out, buffer);                       // warm-up
  backend.synchronize();
  std::vector<double> gbps;
  for (int r = 0; r < reps; ++r) {
    auto start = std::chrono::steady_clock::now();
    backend.sum(out, buffer);
    backend.synchronize();
    gbps.push_back(double(n) * 4.0 / seconds_since(start) / 1e9);
  }
  return *std::max_element(gbps.begin(), gbps.end());
}

double measure_matmul_gflops(Backend& backend, int64_t n, DType dtype, int reps) {
  Tensor a = backend.empty({n, n}, DType::f32);
  Tensor w = backend.empty({n, n}, dtype);
  Tensor out = backend.empty({n, n}, DType::f32);
  backend.fill_uniform(a, 2, -1.0f, 1.0f);
  backend.fill_uniform(w, 3, -1.0f, 1.0f);
  backend.matmul(out, a, w);  // warm-up (and cuBLASLt's heuristic lookup)
  backend.synchronize();
  std::vector<double> gflops;
  for (int r = 0; r < reps; ++r) {
    auto start = std::chrono::steady_clock::now();
    backend.matmul(out, a, w);
    backend.synchronize();
    gflops.push_back(2.0 * double(n) * double(n) * double(n) / seconds_since(start) / 1e9);
  }
  return *std::max_element(gflops.begin(), gflops.end());
}

Roofline measure_roofline(Backend& backend, DType dtype) {
  Roofline r;
  const bool cuda = backend.device() == DeviceKind::cuda;
  r.buffer_bytes = cuda ? (uint64_t(2) << 30) : (uint64_t(1) << 30);
  r.gemm_size = cuda ? 8192 : 2048;
  r.dtype = dtype;
  r.read_gbps = measure_read_bandwidth(backend, r.buffer_bytes, cuda ? 20 : 10);
  r.peak_gflops = measure_matmul_gflops(backend, r.gemm_size, dtype, cuda ? 10 : 5);
  return r;
}

std::string Roofline::describe() const {
  char text[256];
  std::snprintf(text, sizeof(text),
                "read bandwidth %.1f GB/s (streaming %llu MiB), matmul peak %.1f GFLOP/s (%s weights, %lld^3)",
                read_gbps, static_cast<unsigned long long>(buffer_bytes >> 20), peak_gflops,
                dtype_name(dtype), static_cast<long long>(gemm_size));
  return text;
}

}  // namespace minfer
