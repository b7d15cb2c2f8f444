// demo crossover: when does the GPU win? Square matrix products from 8 to 2048 on the CPU (512
// with --quick; Eigen and minfer's SIMD kernels) and to 4096 on the GPU (cuBLAS), timed end to end including the launch;
// and the launch overhead alone (an empty kernel). Small products are over before a kernel
// launch would even have started; large ones are where thousands of GPU cores pay off.
#include "lessons/cuda_lessons.h"
#include "lessons/demos.h"

namespace minfer::demo {

namespace {
double product_seconds(Backend& b, int64_t n, int reps) {
  Tensor x = b.empty({n, n}, DType::f32), w = b.empty({n, n}, DType::f32), out = b.empty({n, n}, DType::f32);
  b.fill_uniform(x, 1, -1.0f, 1.0f);
  b.fill_uniform(w, 2, -1.0f, 1.0f);
  return median_seconds(reps, [&] { b.matmul(out, x, w); }, [&] { b.synchronize(); });
}
}  // namespace

void crossover(const Options& o) {
  Report r("crossover", "square matrix products on the CPU and the GPU: where the GPU starts to win");
  const int64_t cpu_max = o.quick ? 512 : 2048;
  auto cpu = cpu_backend(o);
  std::unique_ptr<Backend> gpu = o.cuda ? cuda_backend() : nullptr;
  double launch_us = 0.0;
  if (gpu) launch_us = cuda_lessons::empty_kernels_seconds(1000, false) / 1000.0 * 1e6;
  std::vector<std::vector<std::string>> rows;
  std::vector<double> cpu_times;  // ms, n = 8, 16, ... cpu_max
  int64_t crossing = 0;
  for (int64_t n = 8; n <= (gpu ? 4096 : cpu_max); n *= 2) {
    const int reps = n <= 256 ? 9 : 3;
    double cpu_ms = NAN, gpu_ms = NAN;
    if (n <= cpu_max) {
      cpu_ms = product_seconds(*cpu, n, reps) * 1e3;
      cpu_times.push_back(cpu_ms);
      r.point("cpu", "CPU (Eigen / SIMD)", double(n), cpu_ms);
    }
    if (gpu) {
      gpu_ms = product_seconds(*gpu, n, reps) * 1e3;
      r.point("cuda", "GPU (cuBLAS)", double(n), gpu_ms);
      if (crossing == 0 && gpu_ms < cpu_ms) crossing = n;
    }
    const double flops = 2.0 * double(n) * double(n) * double(n);
    rows.push_back({std::to_string(n), std::isnan(cpu_ms) ? "-" : fmt("%.4f", cpu_ms),
                    std::isnan(cpu_ms) ? "-" : fmt("%.1f", flops / (cpu_ms / 1e3) / 1e9),
                    gpu ? fmt("%.4f", gpu_ms) : "skipped", gpu ? fmt("%.1f", flops / (gpu_ms / 1e3) / 1e9) : "-"});
  }
  print_table({"n", "CPU ms", "CPU GFLOP/s", "GPU ms", "GPU GFLOP/s"}, rows);
  r.ran("cpu");
  const size_t at_512 = std::min<size_t>(cpu_times.size() - 1, 6);  // n = 8 * 2^6
  r.conclude("cpu", fmt("an 8 x 8 product takes %.2f us on the CPU", cpu_times[0] * 1e3) +
                        fmt(", a %.0f x ", double(8 << at_512)) + fmt("%.0f one", double(8 << at_512)) +
                        fmt(" %.2f ms: time grows with n^3 once fixed overheads are amortised", cpu_times[at_512]));
  if (!gpu) {
    r.skipped("cuda", "no CUDA device (" + o.cuda_reason + ")");
  } else {
    std::printf("empty kernel launch: %.2f us\n", launch_us);
    r.bar("cuda", "empty kernel launch (us)", launch_us);
    r.ran("cuda");
    r.conclude("cuda", crossing > 0 ? fmt("the GPU wins from n = %.0f", double(crossing)) +
                                          fmt("; below that its %.1f us launch overhead alone outlasts the CPU's whole product", launch_us)
                                    : fmt("the CPU won at every size up to %.0f", double(cpu_max)));
  }
  r.axes("n (square matrices)", "ms per product", true, true);
  r.write(o.out_dir);
}

}  // namespace minfer::demo
