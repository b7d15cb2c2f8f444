#include "engine/roofline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/device.h"
#include "core/error.h"

namespace minfer {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// "4 MiB", "2.5 MiB", "1 GiB", "768 KiB": a cache or working-set size.
std::string size_text(uint64_t bytes) {
  const bool gib = bytes >= (uint64_t(1) << 30) && bytes % (uint64_t(1) << 30) == 0;
  const double value = gib ? double(bytes >> 30) : bytes >= (uint64_t(1) << 20) ? double(bytes) / double(1 << 20)
                                                                                : double(bytes) / 1024.0;
  char text[32];
  std::snprintf(text, sizeof(text), value == double(int64_t(value)) ? "%.0f %s" : "%.1f %s", value,
                gib ? "GiB" : bytes >= (uint64_t(1) << 20) ? "MiB" : "KiB");
  return text;
}

constexpr uint64_t kMinReadPerRep = uint64_t(256) << 20;

}  // namespace

std::vector<MemoryLevel> memory_levels(const std::vector<CacheInfo>& caches, int threads, int logical_cores,
                                       const std::string& main_memory) {
  std::vector<MemoryLevel> levels;
  const int cores = std::max(1, logical_cores);
  const int used = std::clamp(threads, 1, cores);
  for (const CacheInfo& cache : caches) {
    if (cache.level < 2 || cache.bytes == 0) continue;
    const int sharing = std::max(1, cache.cpus_sharing);
    const int on_chip = (cores + sharing - 1) / sharing;
    const int instances = std::min(on_chip, (used + sharing - 1) / sharing);
    const uint64_t capacity = uint64_t(cache.bytes) * uint64_t(instances);
    if (!levels.empty() && capacity <= levels.back().capacity_bytes) continue;
    levels.push_back({"L" + std::to_string(cache.level), capacity, 0.0, 0});
  }
  levels.push_back({main_memory, 0, 0.0, 0});
  return levels;
}

uint64_t last_cache_bytes(const std::vector<MemoryLevel>& levels) {
  uint64_t last = 0;
  for (const MemoryLevel& level : levels) last = std::max(last, level.capacity_bytes);
  return last;
}

std::vector<uint64_t> probe_working_sets(const std::vector<MemoryLevel>& levels, uint64_t min_main) {
  constexpr uint64_t kGrain = 64 << 10;  // sets are whole 64 KiB: whole cache lines and vector blocks
  std::vector<uint64_t> sets;
  const uint64_t last_cache = last_cache_bytes(levels);
  if (last_cache > 0) {
    for (uint64_t bytes = std::max<uint64_t>(levels.front().capacity_bytes / 4, kGrain); bytes <= last_cache; bytes *= 2)
      sets.push_back(bytes / kGrain * kGrain);
    // A level less than twice the one before it can fall between two doublings: it gets a set of
    // three quarters of its capacity (or just past the level before).
    uint64_t below = 0;
    for (const MemoryLevel& level : levels) {
      if (level.main_memory()) continue;
      const auto inside = [&](uint64_t b) { return b > below && b <= level.capacity_bytes; };
      if (std::none_of(sets.begin(), sets.end(), inside)) {
        const uint64_t three_quarters = level.capacity_bytes / 4 * 3 / kGrain * kGrain;
        sets.push_back(inside(three_quarters) ? three_quarters : below + kGrain);
      }
      below = level.capacity_bytes;
    }
    std::sort(sets.begin(), sets.end());
  }
  sets.push_back(std::max(min_main, kMainOverLastCache * last_cache));
  return sets;
}

void assign_ceilings(std::vector<MemoryLevel>* levels, const std::vector<ReadProbe>& curve) {
  uint64_t below = 0;  // the capacity of the level before
  for (MemoryLevel& level : *levels) {
    for (const ReadProbe& read : curve) {
      const bool fits = level.main_memory() ? read.bytes >= kMainOverLastCache * below
                                            : read.bytes > below && read.bytes <= level.capacity_bytes;
      if (fits && read.gbps > level.read_gbps) {
        level.read_gbps = read.gbps;
        level.probe_bytes = read.bytes;
      }
    }
    if (!level.main_memory()) below = level.capacity_bytes;
  }
  levels->erase(std::remove_if(levels->begin(), levels->end(), [](const MemoryLevel& l) { return l.read_gbps <= 0; }),
                levels->end());
  // note: a level is never slower than the one behind it. A probe that finds one so (a GPU's L2
  // read through short kernel launches, say) measured the launches, not the level; the level
  // then takes the slower level's ceiling, and a row held in it is not judged against less.
  for (size_t i = levels->size(); i-- > 1;) {
    MemoryLevel& faster = (*levels)[i - 1];
    const MemoryLevel& slower = (*levels)[i];
    if (faster.read_gbps < slower.read_gbps) {
      faster.read_gbps = slower.read_gbps;
      faster.probe_bytes = slower.probe_bytes;
    }
  }
}

size_t level_holding(const std::vector<MemoryLevel>& levels, uint64_t bytes) {
  MINFER_CHECK(!levels.empty(), "a roofline without memory levels");
  for (size_t i = 0; i < levels.size(); ++i)
    if (levels[i].main_memory() || bytes <= levels[i].capacity_bytes) return i;
  return levels.size() - 1;
}

double measure_read_bandwidth(Backend& backend, const Tensor& buffer, uint64_t bytes, int reps) {
  const int64_t n = static_cast<int64_t>(bytes / 4);
  MINFER_CHECK(n >= 1 && n <= buffer.numel(), "a read of ", bytes, " bytes from a buffer of ", buffer.numel() * 4);
  const Tensor x = buffer.slice(0, 0, n);
  Tensor out = backend.empty({1}, DType::f32);
  const uint64_t passes = std::max<uint64_t>(1, (kMinReadPerRep + bytes - 1) / bytes);
  backend.sum(out, x);  // warm-up: brings the set into the caches it fits in
  backend.synchronize();
  std::vector<double> gbps;
  for (int r = 0; r < reps; ++r) {
    auto start = std::chrono::steady_clock::now();
    for (uint64_t p = 0; p < passes; ++p) backend.sum(out, x);
    backend.synchronize();
    gbps.push_back(double(n) * 4.0 * double(passes) / seconds_since(start) / 1e9);
  }
  return *std::max_element(gbps.begin(), gbps.end());
}

double measure_matmul_gflops(Backend& backend, const std::vector<MatmulShape>& shapes, DType dtype, int rounds) {
  struct Operands {
    Tensor a, w, out;
    double flops;
  };
  std::vector<Operands> products;
  for (const MatmulShape& s : shapes) {
    Operands p{backend.empty({s.m, s.n}, DType::f32), backend.empty({s.n, s.n}, dtype),
               backend.empty({s.m, s.n}, DType::f32), 2.0 * double(s.m) * double(s.n) * double(s.n)};
    backend.fill_uniform(p.a, 2, -1.0f, 1.0f);
    backend.fill_uniform(p.w, 3, -1.0f, 1.0f);
    backend.matmul(p.out, p.a, p.w);  // warm-up (and cuBLASLt's heuristic lookup)
    products.push_back(std::move(p));
  }
  backend.synchronize();
  double best = 0.0;
  for (int r = 0; r < rounds; ++r)
    for (Operands& p : products) {
      auto start = std::chrono::steady_clock::now();
      backend.matmul(p.out, p.a, p.w);
      backend.synchronize();
      best = std::max(best, p.flops / seconds_since(start) / 1e9);
    }
  return best;
}

std::vector<MemoryLevel> device_memory_levels(Backend& backend) {
  if (backend.device() == DeviceKind::cuda) {
    const std::vector<CudaDeviceInfo> gpus = cuda_devices();
    std::vector<CacheInfo> caches;
    if (!gpus.empty() && gpus.front().l2_bytes > 0) caches.push_back({2, size_t(gpus.front().l2_bytes), 1});
    return memory_levels(caches, 1, 1, "HBM");
  }
  const CpuInfo cpu = cpu_info();
  return memory_levels(cpu.caches, backend.cpu_threads(), cpu.logical_cores, "DRAM");
}

Roofline measure_roofline(Backend& backend, DType dtype) {
  Roofline r;
  const bool cuda = backend.device() == DeviceKind::cuda;
  r.levels = device_memory_levels(backend);
  const std::vector<uint64_t> sets = probe_working_sets(r.levels, cuda ? (uint64_t(2) << 30) : (uint64_t(1) << 30));
  Tensor buffer = backend.empty({static_cast<int64_t>(sets.back() / 4)}, DType::f32);
  backend.fill_uniform(buffer, 1, -1.0f, 1.0f);  // touch every page before timing
  // note: rounds over every set, each set's best kept across rounds, rather than all of one set's
  // repetitions at once: a neighbour busy for a few milliseconds (seen here on a shared VM: one
  // level's best read halved from one run to the next) then spoils one round, not a level.
  for (uint64_t bytes : sets) r.curve.push_back({bytes, 0.0});
  for (int round = 0; round < 3; ++round)
    for (ReadProbe& read : r.curve)
      read.gbps = std::max(read.gbps, measure_read_bandwidth(backend, buffer, read.bytes, cuda ? 7 : 4));
  buffer = Tensor();
  assign_ceilings(&r.levels, r.curve);
  // note: the peak is the better of two shapes: a square product, and one of 256 rows, the shape
  // of a batched prefill chunk, for which the CPU's packed kernels and Eigen block differently
  // (a 2048^3 product alone was seen 24% below the roofline lesson's 256 x 8192 x 8192 one).
  r.gemm_size = cuda ? 8192 : 2048;
  r.dtype = dtype;
  // note: rounds over both shapes, as for the reads: all of one shape's repetitions at once let one
  // slow phase of a shared host set the peak (a Zen 4 VM's peak read 77.5 and 129.8 GFLOP/s in two
  // runs a minute apart, and the first run's prefill row came out at 143% of it).
  r.peak_gflops = measure_matmul_gflops(backend, {{r.gemm_size, r.gemm_size}, {256, 2 * r.gemm_size}}, dtype,
                                        cuda ? 10 : 3);
  return r;
}

std::string Roofline::describe() const {
  std::string text = "read bandwidth";
  for (size_t i = 0; i < levels.size(); ++i) {
    const MemoryLevel& l = levels[i];
    char part[160];
    if (l.main_memory())
      std::snprintf(part, sizeof(part), "%s %s %.1f GB/s (streaming %s)", i ? "," : "", l.name.c_str(), l.read_gbps,
                    size_text(l.probe_bytes).c_str());
    else
      std::snprintf(part, sizeof(part), "%s %s (%s) %.1f GB/s", i ? "," : "", l.name.c_str(),
                    size_text(l.capacity_bytes).c_str(), l.read_gbps);
    text += part;
  }
  char peak[160];
  std::snprintf(peak, sizeof(peak), "; matmul peak %.1f GFLOP/s (%s weights, up to %lld^3)", peak_gflops,
                dtype_name(dtype), static_cast<long long>(gemm_size));
  return text + peak;
}

std::string Roofline::describe_curve() const {
  std::string text;
  for (const ReadProbe& read : curve) {
    char part[64];
    std::snprintf(part, sizeof(part), "%s%s %.1f", text.empty() ? "" : ", ", size_text(read.bytes).c_str(), read.gbps);
    text += part;
  }
  return text + " GB/s";
}

std::string over_ceiling_reason(const Roofline& roofline, uint64_t bytes, double gbps) {
  const size_t index = level_holding(roofline.levels, bytes);
  const MemoryLevel& level = roofline.levels[index];
  if (gbps <= level.read_gbps) return "";
  char text[200];
  const double mb = double(bytes) / 1e6;
  if (index > 0 && bytes <= kMainOverLastCache * roofline.levels[index - 1].capacity_bytes) {
    const MemoryLevel& faster = roofline.levels[index - 1];
    std::snprintf(text, sizeof(text), "over: part of the %.1f MB step stays in the %s %s", mb,
                  size_text(faster.capacity_bytes).c_str(), faster.name.c_str());
  } else if (index == 0 && bytes < level.probe_bytes) {
    std::snprintf(text, sizeof(text), "over: the %.1f MB step is smaller than the %s %s read it is compared with", mb,
                  size_text(level.probe_bytes).c_str(), level.name.c_str());
  } else {
    std::snprintf(text, sizeof(text), "over: faster than the probe's best %s read (%s); the probe met a busier machine",
                  level.name.c_str(), size_text(level.probe_bytes).c_str());
  }
  return text;
}

double measure_all_reduce_seconds(Communicator& ranks, Backend& backend, int64_t floats) {
  std::vector<float> zeros(static_cast<size_t>(floats), 0.0f);  // sums that stay 0
  const Tensor x = backend.empty({floats}, DType::f32);
  backend.copy_async(x, Tensor::wrap(zeros.data(), {floats}, DType::f32, DeviceKind::cpu));
  backend.synchronize();
  constexpr int kReps = 5, kPerRep = 20;
  double best = 1e30;
  for (int r = 0; r < kReps; ++r) {
    ranks.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kPerRep; ++i) ranks.all_reduce_sum(x);
    backend.synchronize();  // (NCCL's sums run on the stream)
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kPerRep);
  }
  return best;
}

}  // namespace minfer
