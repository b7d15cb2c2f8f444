// demo roofline: the machine's two ceilings, measured (engine/roofline.h, the same code as
// `minfer bench --roofline`), and minfer's kernels placed under them by arithmetic intensity
// (FLOPs per byte moved) and achieved GFLOP/s. Matrix-vector products (decode) sit far left,
// under the bandwidth slope; matrix-matrix products (prefill) far right, under the flat peak.
// note: every operand is 256 MiB, several times the last-level cache (a 32 MiB L3 was seen to
// keep a good part of a 64 MiB operand between repetitions), so the memory-bound kernels meet
// DRAM as they do in a real model.
#include "engine/roofline.h"
#include "lessons/demos.h"

namespace minfer::demo {

namespace {

struct KernelPoint {
  std::string name;
  double flops, bytes, seconds;
};

std::vector<KernelPoint> measure_kernels(Backend& b, DType weights, bool quick) {
  std::vector<KernelPoint> points;
  auto sync = [&] { b.synchronize(); };
  const int reps = quick ? 5 : 11;
  const int64_t K = 8192, N = 8192;
  Tensor w = b.empty({N, K}, weights);
  b.fill_uniform(w, 1, -0.02f, 0.02f);
  for (int64_t M : {1, 16, 256}) {
    Tensor x = b.empty({M, K}, DType::f32), out = b.empty({M, N}, DType::f32);
    b.fill_uniform(x, 2, -1.0f, 1.0f);
    const double seconds = median_seconds(reps, [&] { b.matmul(out, x, w); }, sync);
    points.push_back({"matmul M=" + std::to_string(M), 2.0 * M * N * K,
                      double(dtype_bytes(weights, uint64_t(N * K)) + 4 * M * (K + N)), seconds});
  }
  // The same products with 8-bit weights (34 bytes per 32): decode's intensity rises 3.76x over f32.
  if (weights != DType::q8_0) {
    w = Tensor();
    Tensor w8 = b.empty({N, K}, DType::q8_0);
    b.fill_uniform(w8, 1, -0.02f, 0.02f);
    for (int64_t M : {1, 16}) {
      Tensor x = b.empty({M, K}, DType::f32), out = b.empty({M, N}, DType::f32);
      b.fill_uniform(x, 2, -1.0f, 1.0f);
      const double seconds = median_seconds(reps, [&] { b.matmul(out, x, w8); }, sync);
      points.push_back({"q8_0 matmul M=" + std::to_string(M), 2.0 * M * N * K,
                        double(dtype_bytes(DType::q8_0, uint64_t(N * K)) + 4 * M * (K + N)), seconds});
    }
  }
  const int64_t D = 4096, rows = 16384;
  Tensor x = b.empty({rows, D}, DType::f32), y = b.empty({rows, D}, DType::f32), z = b.empty({rows, D}, DType::f32);
  Tensor g = b.empty({D}, DType::f32);
  b.fill_uniform(x, 3, -1.0f, 1.0f);
  b.fill_uniform(z, 8, -1.0f, 1.0f);
  b.fill_uniform(g, 4, 0.5f, 1.5f);
  // rmsnorm reads x and writes y (8 bytes an element); swiglu reads two inputs and writes one (12).
  points.push_back({"rmsnorm", 4.0 * rows * D, 8.0 * rows * D,
                    median_seconds(reps, [&] { b.rmsnorm(y, x, g, 1e-5f); }, sync)});
  points.push_back({"swiglu", 6.0 * rows * D, 12.0 * rows * D, median_seconds(reps, [&] { b.swiglu(y, x, z); }, sync)});
  const int64_t T = 2048, heads = 16, hd = 64, seqs = 16;
  Tensor q = b.empty({seqs, heads * hd}, DType::f32), o = b.empty({seqs, heads * hd}, DType::f32);
  Tensor k = b.empty({seqs, heads, T, hd}, DType::f32), v = b.empty({seqs, heads, T, hd}, DType::f32);
  b.fill_uniform(q, 5, -1.0f, 1.0f);
  b.fill_uniform(k, 6, -1.0f, 1.0f);
  b.fill_uniform(v, 7, -1.0f, 1.0f);
  Tensor seq = b.empty({seqs}, DType::i32), pos = b.empty({seqs}, DType::i32);
  Tensor ids = b.empty_host({2 * seqs}, DType::i32);
  for (int64_t s = 0; s < seqs; ++s) {
    ids.data_as<int32_t>()[s] = static_cast<int32_t>(s);
    ids.data_as<int32_t>()[seqs + s] = static_cast<int32_t>(T - 1);
  }
  seq.copy_from(ids.slice(0, 0, seqs));
  pos.copy_from(ids.slice(0, seqs, 2 * seqs));
  points.push_back({"attention, decode of 16 x 2048", 4.0 * seqs * heads * hd * T, 2.0 * seqs * heads * T * hd * 4,
                    median_seconds(reps, [&] { b.attention(o, q, k, v, seq, pos, hd, AttentionAlgorithm::online_softmax); }, sync)});
  return points;
}

void run_half(Report& r, const std::string& half, Backend& b, DType weights, bool quick) {
  const Roofline roof = measure_roofline(b, weights);
  std::printf("%s ceilings: %s\n", half.c_str(), roof.describe().c_str());
  const double ridge = roof.peak_gflops / roof.read_gbps;
  for (double intensity = ridge / 256; intensity <= ridge * 256; intensity *= 2)
    r.point(half, "ceiling", intensity, std::min(roof.peak_gflops, intensity * roof.read_gbps));
  std::vector<std::vector<std::string>> rows;
  double decode_fraction = 0, prefill_fraction = 0, q8_fraction = 0, q8_intensity = 0;
  for (const KernelPoint& k : measure_kernels(b, weights, quick)) {
    const double intensity = k.flops / k.bytes, gflops = k.flops / k.seconds / 1e9;
    const double bound = std::min(roof.peak_gflops, intensity * roof.read_gbps);
    r.point(half, "kernels", intensity, gflops, k.name);
    rows.push_back({k.name, fmt("%.2f", intensity), fmt("%.1f", gflops), fmt("%.1f", bound),
                    fmt("%.0f%%", 100.0 * gflops / bound), intensity < ridge ? "memory" : "compute"});
    if (k.name == "matmul M=1") decode_fraction = gflops / bound;
    if (k.name == "matmul M=256") prefill_fraction = gflops / bound;
    if (k.name == "q8_0 matmul M=1") {
      q8_fraction = gflops / bound;
      q8_intensity = intensity;
    }
  }
  print_table({half + " kernel", "FLOP/byte", "GFLOP/s", "roof GFLOP/s", "of roof", "bound by"}, rows);
  r.ran(half);
  r.conclude(half, fmt("the ridge is at %.1f FLOPs per byte", ridge) +
                       fmt(": decode's matrix-vector product (%.2f FLOP/byte) is memory-bound and reaches ",
                           2.0 / dtype_size(weights)) +
                       fmt("%.0f%% of its bandwidth roof", 100 * decode_fraction) +
                       fmt(", prefill's 256-row product is compute-bound at %.0f%% of the measured peak", 100 * prefill_fraction) +
                       (q8_intensity > 0 ? fmt("; with q8_0 weights decode moves right to %.2f FLOP/byte", q8_intensity) +
                                               fmt(" and reaches %.0f%% of that roof", 100 * q8_fraction)
                                         : std::string()));
}

}  // namespace

void roofline(const Options& o) {
  Report r("roofline", "the measured ceilings and minfer's kernels under them");
  auto cpu = cpu_backend(o);
  run_half(r, "cpu", *cpu, DType::f32, o.quick);
  if (!o.cuda) {
    r.skipped("cuda", "no CUDA device (" + o.cuda_reason + ")");
  } else {
    auto gpu = cuda_backend();
    run_half(r, "cuda", *gpu, DType::f16, o.quick);
  }
  r.axes("arithmetic intensity (FLOPs per byte)", "GFLOP/s", true, true);
  r.write(o.out_dir);
}

}  // namespace minfer::demo
