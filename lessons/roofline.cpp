// demo roofline: the machine's ceilings, measured (engine/roofline.h, the same code as
// `minfer bench --roofline`): a bandwidth slope per memory level and the flat matmul peak, and
// minfer's kernels placed under them by arithmetic intensity (FLOPs per byte moved) and achieved
// GFLOP/s. Matrix-vector products (decode) sit far left, under the bandwidth slopes;
// matrix-matrix products (prefill) far right, under the flat peak.
// note: the main operands are 4x the last cache (at least 256 MiB: a 32 MiB L3 was seen to keep
// a good part of a 64 MiB operand between repetitions), so the memory-bound kernels meet DRAM as
// they do in a model larger than the caches; every memory-bound kernel is judged against the
// slope of the level its bytes fit in (--quick: 256 MiB operands, DRAM or a large L3). Beside them, a
// matrix-vector product whose weights are the working set at which the probe found each cache
// level's bandwidth: the same kernel, cache-resident, judged against that level's slope.
#include "engine/kv_cache.h"
#include "engine/roofline.h"
#include "lessons/demos.h"

namespace minfer::demo {

namespace {

struct KernelPoint {
  std::string name;
  double flops, bytes, seconds;
  std::string level;  // a memory-bound kernel's: the level its bytes fit in; empty: compute-bound
};

// A product of M rows with (N, K) weights of `dtype`, timed; weights uniform in +-0.02.
KernelPoint time_matmul(Backend& b, const std::string& name, int64_t M, int64_t N, int64_t K, DType dtype, int reps) {
  Tensor w = b.empty({N, K}, dtype), x = b.empty({M, K}, DType::f32), out = b.empty({M, N}, DType::f32);
  b.fill_uniform(w, 1, -0.02f, 0.02f);
  b.fill_uniform(x, 2, -1.0f, 1.0f);
  const double seconds = median_seconds(reps, [&] { b.matmul(out, x, w); }, [&] { b.synchronize(); });
  return {name, 2.0 * double(M * N * K), double(dtype_bytes(dtype, uint64_t(N * K)) + 4 * M * (K + N)), seconds, ""};
}

std::vector<KernelPoint> measure_kernels(Backend& b, const Roofline& roof, DType weights, bool quick) {
  std::vector<KernelPoint> points;
  auto sync = [&] { b.synchronize(); };
  const int reps = quick ? 5 : 11;
  // Operands of 4x the last cache, at least 256 MiB (--quick: 256 MiB, which a large L3 may hold;
  // each kernel is judged against the level its bytes fit in); rows rounded up to 64.
  const uint64_t operand = quick ? uint64_t(256) << 20
                                 : std::max<uint64_t>(uint64_t(256) << 20, kMainOverLastCache * last_cache_bytes(roof.levels));
  auto rows_for = [&](uint64_t row_bytes) { return int64_t((operand / row_bytes + 63) / 64 * 64); };
  auto memory_bound = [&](KernelPoint k) {
    k.level = roof.level_for(uint64_t(k.bytes)).name;
    return k;
  };
  const int64_t K = 8192;
  for (int64_t M : {1, 16})
    points.push_back(memory_bound(
        time_matmul(b, "matmul M=" + std::to_string(M), M, rows_for(dtype_bytes(weights, K)), K, weights, reps)));
  points.push_back(time_matmul(b, "matmul M=256", 256, 8192, K, weights, reps));  // prefill: compute-bound
  // The same products with 8-bit weights (34 bytes per 32): decode's intensity rises 3.76x over f32.
  if (weights != DType::q8_0)
    for (int64_t M : {1, 16})
      points.push_back(memory_bound(time_matmul(b, "q8_0 matmul M=" + std::to_string(M), M,
                                                rows_for(dtype_bytes(DType::q8_0, K)), K, DType::q8_0, reps)));
  // The same matrix-vector product with its weights in each cache level.
  for (const MemoryLevel& level : roof.levels) {
    if (level.main_memory()) continue;
    // Weights of the probe's best set, at most half the level, so that they and the activations fit in it.
    const uint64_t weight_bytes = std::min(level.probe_bytes, level.capacity_bytes / 2);
    const int64_t Kc = 1024, Nc = std::max<int64_t>(64, int64_t(weight_bytes / dtype_bytes(weights, Kc)));
    points.push_back(time_matmul(b, "matmul M=1 in " + level.name, 1, Nc, Kc, weights, quick ? 51 : 201));
    points.back().level = level.name;
  }
  const int64_t D = 4096, rows = rows_for(4 * D);
  Tensor x = b.empty({rows, D}, DType::f32), y = b.empty({rows, D}, DType::f32), z = b.empty({rows, D}, DType::f32);
  Tensor g = b.empty({D}, DType::f32);
  b.fill_uniform(x, 3, -1.0f, 1.0f);
  b.fill_uniform(z, 8, -1.0f, 1.0f);
  b.fill_uniform(g, 4, 0.5f, 1.5f);
  // rmsnorm reads x and writes y (8 bytes an element); swiglu reads two inputs and writes one (12).
  points.push_back(memory_bound({"rmsnorm", 4.0 * rows * D, 8.0 * rows * D,
                                 median_seconds(reps, [&] { b.rmsnorm(y, x, g, 1e-5f); }, sync), ""}));
  points.push_back(memory_bound({"swiglu", 6.0 * rows * D, 12.0 * rows * D,
                                 median_seconds(reps, [&] { b.glu(y, x, z, GluActivation::silu); }, sync), ""}));
  x = y = z = Tensor();
  const int64_t T = 2048, heads = 16, hd = 64;
  const uint64_t seq_bytes = 2 * heads * T * hd * 4;  // keys and values of one sequence
  const int64_t seqs = std::max<int64_t>(16, int64_t((operand + seq_bytes - 1) / seq_bytes));
  Tensor q = b.empty({seqs, heads * hd}, DType::f32), o = b.empty({seqs, heads * hd}, DType::f32);
  // Each sequence's keys in its own blocks, in order, as a decoder lays them out (engine/kv_cache.h).
  const int64_t block = KvCache::kDefaultBlockSize, width = (T + block - 1) / block;
  Tensor k = b.empty({seqs * width, heads, block, hd}, DType::f32), v = b.empty({seqs * width, heads, block, hd}, DType::f32);
  b.fill_uniform(q, 5, -1.0f, 1.0f);
  b.fill_uniform(k, 6, -1.0f, 1.0f);
  b.fill_uniform(v, 7, -1.0f, 1.0f);
  Tensor seq = b.empty({seqs}, DType::i32), pos = b.empty({seqs}, DType::i32), table = b.empty({seqs, width}, DType::i32);
  Tensor ids = b.empty_host({2 * seqs + seqs * width}, DType::i32);
  int32_t* id = ids.data_as<int32_t>();
  for (int64_t s = 0; s < seqs; ++s) {
    id[s] = static_cast<int32_t>(s);
    id[seqs + s] = static_cast<int32_t>(T - 1);
  }
  for (int64_t i = 0; i < seqs * width; ++i) id[2 * seqs + i] = static_cast<int32_t>(i);
  seq.copy_from(ids.slice(0, 0, seqs));
  pos.copy_from(ids.slice(0, seqs, 2 * seqs));
  table.copy_from(ids.slice(0, 2 * seqs, 2 * seqs + seqs * width).reshape({seqs, width}));
  points.push_back(memory_bound(
      {"attention, decode of " + std::to_string(seqs) + " x 2048", 4.0 * seqs * heads * hd * T,
       2.0 * seqs * heads * T * hd * 4,
       median_seconds(reps, [&] { b.attention(o, q, k, v, table, seq, pos, {hd}, AttentionAlgorithm::online_softmax); }, sync),
       ""}));
  return points;
}

// The roof of `level` at `intensity`: min(peak, intensity x its bandwidth); the peak alone for
// a kernel with no level (compute-bound).
double roof_at(const Roofline& roof, const std::string& level, double intensity) {
  for (const MemoryLevel& l : roof.levels)
    if (l.name == level) return std::min(roof.peak_gflops, intensity * l.read_gbps);
  return roof.peak_gflops;
}

void run_half(Report& r, const std::string& half, Backend& b, DType weights, bool quick) {
  const Roofline roof = measure_roofline(b, weights);
  std::printf("%s ceilings: %s\n", half.c_str(), roof.describe().c_str());
  const double ridge = roof.peak_gflops / roof.main_memory().read_gbps;
  for (const MemoryLevel& level : roof.levels)
    for (double intensity = ridge / 256; intensity <= ridge * 256; intensity *= 2)
      r.point(half, "ceiling " + level.name, intensity, std::min(roof.peak_gflops, intensity * level.read_gbps));
  std::vector<std::vector<std::string>> rows;
  double decode_fraction = 0, prefill_fraction = 0, q8_fraction = 0, q8_intensity = 0;
  std::string cached, decode_level;
  for (const KernelPoint& k : measure_kernels(b, roof, weights, quick)) {
    const double intensity = k.flops / k.bytes, gflops = k.flops / k.seconds / 1e9;
    const double bound = roof_at(roof, k.level, intensity);
    r.point(half, "kernels", intensity, gflops, k.name);
    const bool memory = bound < roof.peak_gflops;
    // A kernel over its roof says why, as a bench row does.
    const std::string over = gflops <= bound ? ""
                             : memory        ? over_ceiling_reason(roof, uint64_t(k.bytes), gflops / intensity)
                                             : "over: this shape runs faster than those the peak was measured on";
    rows.push_back({k.name, fmt("%.2f", intensity), fmt("%.1f", gflops), k.level.empty() ? "peak" : k.level,
                    fmt("%.1f", bound), fmt("%.0f%%", 100.0 * gflops / bound),
                    std::string(memory ? "memory" : "compute") + (over.empty() ? "" : " (" + over + ")")});
    if (k.name == "matmul M=1") {
      decode_fraction = gflops / bound;
      decode_level = k.level;
    }
    if (k.name == "matmul M=256") prefill_fraction = gflops / bound;
    if (k.name == "q8_0 matmul M=1") {
      q8_fraction = gflops / bound;
      q8_intensity = intensity;
    }
    if (k.name.rfind("matmul M=1 in ", 0) == 0)
      cached += "; with its weights in " + k.level + fmt(" it runs at %.1f GFLOP/s", gflops) +
                fmt(", %.2fx what ", gflops / (intensity * roof.main_memory().read_gbps)) + roof.main_memory().name +
                fmt(" allows and %.0f%% of ", 100.0 * gflops / bound) + k.level + "'s roof";
  }
  print_table({half + " kernel", "FLOP/byte", "GFLOP/s", "roof", "roof GFLOP/s", "of roof", "bound by"}, rows);
  r.ran(half);
  r.conclude(half, fmt("the ridge is at %.1f FLOPs per byte of ", ridge) + roof.main_memory().name +
                       fmt(": decode's matrix-vector product (%.2f FLOP/byte) is memory-bound and reaches ",
                           2.0 / dtype_bytes_per_element(weights)) +
                       fmt("%.0f%% of its ", 100 * decode_fraction) + decode_level + " roof" + cached +
                       fmt("; prefill's 256-row product is compute-bound at %.0f%% of the measured peak", 100 * prefill_fraction) +
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
