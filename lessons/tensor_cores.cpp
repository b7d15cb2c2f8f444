// demo tensor-cores: specialist units.
// CUDA: a 4096 product in f32 on CUDA cores (cuBLAS SGEMM), in TF32 and in f16 on Tensor Cores
// (cuBLAS, cuBLASLt), and minfer's hand-written naive, tiled and mma (WMMA) kernels: TFLOP/s
// and the fraction of the data sheet's peak.
// CPU, the same lesson about the CPU's specialist units: a naive triple loop, a cache-tiled loop
// the compiler vectorises, Eigen's f32 GEMM (SIMD FMA, register and cache blocking), and bf16
// inputs through the AVX-512 BF16 dot-product instruction (two multiply-adds per lane) where the
// CPU has it, in GFLOP/s against the FMA peak measured with a register-only loop.
#include <thread>

#include "core/threads.h"
#include "kernels/cpu/simd.h"
#include "lessons/cuda_lessons.h"
#include "lessons/demos.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace minfer::demo {

namespace {

// c (n x n) = a (n x n) * b (n x n), b row-major: the textbook loop, striding down b's columns.
__attribute__((noinline)) void naive(float* c, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float s = 0.0f;
      for (int64_t k = 0; k < n; ++k) s += a[i * n + k] * b[k * n + j];
      c[i * n + j] = s;
    }
}

// The same in 64 x 64 blocks with the i-k-j order: the inner loop walks rows of b and c
// contiguously, so the compiler vectorises it, and each block stays in L1/L2.
__attribute__((noinline)) void tiled(float* c, const float* a, const float* b, int64_t n) {
  constexpr int64_t T = 64;
  std::fill(c, c + n * n, 0.0f);
  for (int64_t i0 = 0; i0 < n; i0 += T)
    for (int64_t k0 = 0; k0 < n; k0 += T)
      for (int64_t j0 = 0; j0 < n; j0 += T)
        for (int64_t i = i0; i < std::min(n, i0 + T); ++i)
          for (int64_t k = k0; k < std::min(n, k0 + T); ++k) {
            const float aik = a[i * n + k];
            for (int64_t j = j0; j < std::min(n, j0 + T); ++j) c[i * n + j] += aik * b[k * n + j];
          }
}

#if defined(__AVX512BF16__)
constexpr bool kHaveBf16 = true;
// c (n x n) = a (n x n) * w (n x n)^T with bf16 inputs, n a multiple of 32: 4 x 4 output tiles,
// each k step one vdpbf16ps per tile element (16 lanes x 2 products).
__attribute__((noinline)) void bf16_dot(float* c, const uint16_t* a, const uint16_t* w, int64_t n) {
  for (int64_t i = 0; i < n; i += 4)
    for (int64_t j = 0; j < n; j += 4) {
      __m512 acc[16];
      for (auto& v : acc) v = _mm512_setzero_ps();
      for (int64_t k = 0; k < n; k += 32) {
        __m512bh av[4], wv[4];
        for (int r = 0; r < 4; ++r) {
          av[r] = (__m512bh)_mm512_loadu_si512(a + (i + r) * n + k);
          wv[r] = (__m512bh)_mm512_loadu_si512(w + (j + r) * n + k);
        }
        for (int r = 0; r < 4; ++r)
          for (int s = 0; s < 4; ++s) acc[r * 4 + s] = _mm512_dpbf16_ps(acc[r * 4 + s], av[r], wv[s]);
      }
      for (int r = 0; r < 4; ++r)
        for (int s = 0; s < 4; ++s) c[(i + r) * n + j + s] = _mm512_reduce_add_ps(acc[r * 4 + s]);
    }
}
#else
constexpr bool kHaveBf16 = false;
void bf16_dot(float*, const uint16_t*, const uint16_t*, int64_t) {}
#endif

// Peak FMA throughput: every thread runs independent chains of vector FMAs on registers, in
// the widest vectors the build has (kernels/cpu/simd.h: AVX-512, AVX2 or scalar).
double fma_peak_gflops(ThreadPool& pool) {
  constexpr int64_t kIterations = 20000000;
  constexpr int kChains = cpu::simd::kWidth >= 16 ? 16 : 12;  // accumulators + 2 operands fit the registers
  const double seconds = median_seconds(3, [&] {
    pool.run(pool.size(), [](int) {
      namespace simd = cpu::simd;
      simd::Vec acc[kChains];
      for (int i = 0; i < kChains; ++i) acc[i] = simd::set1(float(i) * 1e-3f);
      const simd::Vec a = simd::set1(0.999f), b = simd::set1(1e-6f);
      for (int64_t it = 0; it < kIterations / kChains; ++it)
        for (int i = 0; i < kChains; ++i) acc[i] = simd::fma(acc[i], a, b);
      float s = 0;
      for (int i = 0; i < kChains; ++i) s += simd::sum(acc[i]);
      __asm__ volatile("" ::"x"(s));
    });
  });
  return double(pool.size()) * double(kIterations) * cpu::simd::kWidth * 2.0 / seconds / 1e9;
}

}  // namespace

void tensor_cores(const Options& o) {
  Report r("tensor-cores", "specialist units: SIMD and bf16 dot products on the CPU, Tensor Cores on the GPU");
  const int64_t n = o.quick ? 256 : 1024;
  ThreadPool one_thread(1);
  const double peak = fma_peak_gflops(one_thread);
  std::vector<float> a(size_t(n * n)), b(size_t(n * n)), c(size_t(n * n));
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = float(i % 97) * 0.01f;
    b[i] = float(i % 89) * 0.01f;
  }
  const double flops = 2.0 * double(n) * double(n) * double(n);
  std::vector<std::vector<std::string>> rows;
  auto add = [&](const std::string& name, double seconds) {
    const double gflops = flops / seconds / 1e9;
    rows.push_back({name, fmt("%.2f", seconds * 1e3), fmt("%.1f", gflops), fmt("%.0f%%", 100 * gflops / peak)});
    r.bar("cpu", name, gflops);
    return gflops;
  };
  const int reps = o.quick ? 1 : 3;
  const double naive_g = add("naive loop", median_seconds(reps, [&] { naive(c.data(), a.data(), b.data(), n); }));
  add("cache-tiled loop", median_seconds(reps, [&] { tiled(c.data(), a.data(), b.data(), n); }));
  // Eigen on one thread, the same thread count as the loops above.
  BackendOptions one;
  one.threads = 1;
  auto cpu = make_backend(BackendKind::cpu, one);
  Tensor x = cpu->empty({n, n}, DType::f32), w = cpu->empty({n, n}, DType::f32), out = cpu->empty({n, n}, DType::f32);
  cpu->fill_uniform(x, 1, -1.0f, 1.0f);
  cpu->fill_uniform(w, 2, -1.0f, 1.0f);
  const double eigen_g = add(std::string("Eigen f32 GEMM (") + cpu::simd::name() + ")", median_seconds(reps + 2, [&] { cpu->matmul(out, x, w); }));
  double bf16_g = 0.0;
  if (kHaveBf16) {
    std::vector<uint16_t> a16(a.size()), w16(a.size());
    convert_from_f32(a16.data(), DType::bf16, a.data(), a.size());
    convert_from_f32(w16.data(), DType::bf16, b.data(), b.size());
    bf16_g = add("bf16 dot products (AVX-512 BF16)", median_seconds(reps + 2, [&] { bf16_dot(c.data(), a16.data(), w16.data(), n); }));
  }
  std::printf("one thread, n = %lld; FMA peak measured with a register-only loop: %.1f GFLOP/s%s\n",
              static_cast<long long>(n), peak, kHaveBf16 ? "" : " (this CPU or build has no AVX-512 BF16)");
  print_table({"CPU product", "ms", "GFLOP/s", "of the f32 FMA peak"}, rows);
  r.ran("cpu");
  r.conclude("cpu", fmt("Eigen's SIMD GEMM runs %.0fx the naive loop", eigen_g / naive_g) +
                        fmt(" at %.0f%% of the measured FMA peak", 100 * eigen_g / peak) +
                        (kHaveBf16 ? fmt("; bf16 dot-product instructions reach %.0f GFLOP/s", bf16_g) +
                                         fmt(", %.1fx f32 Eigen, from two products per lane per instruction", bf16_g / eigen_g)
                                   : std::string("")));

  if (!o.cuda) {
    r.skipped("cuda", "no CUDA device (" + o.cuda_reason + ")");
  } else {
    const int64_t m = o.quick ? 2048 : 4096;
    const double gflop = 2.0 * double(m) * double(m) * double(m) / 1e9;
    const cuda_lessons::Peaks peaks = cuda_lessons::datasheet_peaks();
    std::vector<std::vector<std::string>> gpu_rows;
    auto gpu_row = [&](const std::string& name, double seconds, double peak_tflops) {
      const double tflops = gflop / seconds / 1e3;
      gpu_rows.push_back({name, fmt("%.3f", seconds * 1e3), fmt("%.1f", tflops),
                          peak_tflops > 0 ? fmt("%.0f%%", 100 * tflops / peak_tflops) : "n/a"});
      r.bar("cuda", name, tflops);
      return tflops;
    };
    auto product = [&](GemmKind gemm, DType dtype) {
      auto gpu = cuda_backend(gemm);
      Tensor gx = gpu->empty({m, m}, DType::f32), gw = gpu->empty({m, m}, dtype), go = gpu->empty({m, m}, DType::f32);
      gpu->fill_uniform(gx, 1, -1.0f, 1.0f);
      gpu->fill_uniform(gw, 2, -1.0f, 1.0f);
      return median_seconds(gemm == GemmKind::naive ? 2 : 5, [&] { gpu->matmul(go, gx, gw); }, [&] { gpu->synchronize(); });
    };
    const double f32 = gpu_row("cuBLAS SGEMM, f32 (CUDA cores)", product(GemmKind::cublas, DType::f32), peaks.f32);
    gpu_row("cuBLAS SGEMM, TF32 (Tensor Cores)", cuda_lessons::tf32_sgemm_seconds(m), peaks.tf32);
    const double f16 = gpu_row("cuBLASLt, f16 (Tensor Cores)", product(GemmKind::cublas, DType::f16), peaks.f16);
    gpu_row("minfer naive, f32", product(GemmKind::naive, DType::f32), peaks.f32);
    gpu_row("minfer tiled, f32", product(GemmKind::tiled, DType::f32), peaks.f32);
    const double mma = gpu_row("minfer mma (WMMA), f16", product(GemmKind::mma, DType::f16), peaks.f16);
    print_table({"GPU product, n = " + std::to_string(m), "ms", "TFLOP/s", "of peak (" + peaks.source + ")"}, gpu_rows);
    r.ran("cuda");
    r.conclude("cuda", fmt("Tensor Cores in f16 run %.1fx f32 on CUDA cores", f16 / f32) +
                           fmt("; minfer's simple WMMA kernel reaches %.0f%% of cuBLASLt", 100 * mma / f16));
  }
  r.axes("", "GFLOP/s (CPU), TFLOP/s (GPU)", false, true);
  r.write(o.out_dir);
}

}  // namespace minfer::demo
