// The ceilings of a roofline, measured on the machine at hand rather than taken from a data sheet:
// the read bandwidth of every level of the memory hierarchy, and the matrix-multiply peak.
// Decode is judged against the bandwidth of the level its bytes per step fit in, prefill against
// the peak. `minfer bench --roofline` and the `roofline`, `bytes` and `batching` lessons use this.
//
// Why levels. A decode step reads every weight once, so tokens/s <= bandwidth / bytes per step,
// but which bandwidth depends on where those bytes live between steps. A model larger than the
// last-level cache streams from DRAM every step; one that fits in a 300 MiB L3 is read from L3,
// which can be twice as fast, so a single DRAM line would show it at "142% of bandwidth". The
// probe is a cache-aware roofline, as the Empirical Roofline Toolkit and Intel Advisor draw one:
//   - the levels and their sizes are the caches the OS reports (engine/cpu_info.h; on a GPU its L2),
//     scaled to the threads in use: a cache private to a core holds one instance per thread, a
//     shared one is shared (a 2 MiB L2 per core is 4 MiB for two threads, a 32 MiB L3 stays 32);
//   - the probe streams working sets from a quarter of the smallest level's capacity, doubling up
//     to the last cache's, and one main-memory set of 4x the last cache (at least 1 GiB; 2 GiB on
//     a GPU), through the backend's own `sum` op and threads, the best of several repetitions;
//   - a level's ceiling is the best read among the working sets that fit in it and not in the
//     level before; main memory's is the big set's. A row is compared with the level whose
//     capacity first holds its bytes per step.
// note: the best read of a level, not the read at the row's own size, is the ceiling, as in
// Advisor: a ceiling is what the level can deliver. The level sizes are what the OS says; on a
// virtual machine a large shared L3 may be mostly someone else's, and then the reads that fit in
// it run at DRAM speed beyond some size (the probe's curve shows where), which a row's fraction
// of that level's best makes visible rather than hides.
// note: L1 holds no model's step and a `sum` call costs more to hand out to the threads than to
// read an L1-sized set, so the smallest level probed is the one after L1.
// note: a private cache's capacity counts one instance per thread, as if each thread kept its own
// part of a step; minfer's pool hands out blocks first come, first served, so a part can move to
// another core between steps, and a set of the whole aggregate L2 reads well below a smaller one
// (on the Intel VM of bench/results/cpu-xeon/, 4 MiB at about half of 2 MiB's speed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/communicator.h"
#include "engine/cpu_info.h"

namespace minfer {

// One level of the memory hierarchy as the threads in use see it.
struct MemoryLevel {
  std::string name;             // "L2", "L3", "DRAM"; on a GPU "L2", "HBM"
  uint64_t capacity_bytes = 0;  // what the threads in use can keep there; 0 for main memory (unbounded)
  double read_gbps = 0.0;       // the best streaming read of a working set that fits here and not below
  uint64_t probe_bytes = 0;     // the working set of that best read
  bool main_memory() const { return capacity_bytes == 0; }
};

// One streaming read of the probe: a working set and the best GB/s (1e9 bytes/s) it was read at.
struct ReadProbe {
  uint64_t bytes = 0;
  double gbps = 0.0;
};

// The levels for `threads` threads from the caches the OS reports, fastest first, L1 left out
// (see the note above), then main memory named `main_memory`. A cache private to a core holds
// min(threads, cores) instances, one shared by k CPUs ceil(threads / k) (up to its count on the
// chip); a level that holds no more than the one before it is dropped.
std::vector<MemoryLevel> memory_levels(const std::vector<CacheInfo>& caches, int threads, int logical_cores,
                                       const std::string& main_memory);

// A working set this many times the last cache streams from main memory: the probe's main-memory
// set, and the size of a model that decode must read from main memory (preset:dram-bound).
constexpr uint64_t kMainOverLastCache = 4;
// The capacity of the last cache level (the largest); 0 where there is none.
uint64_t last_cache_bytes(const std::vector<MemoryLevel>& levels);

// The working sets the probe streams: a quarter of the first cache level's capacity, doubling
// while within the last cache's (and three quarters of any level no doubling lands in), then the
// main-memory set: 4x the last cache, at least `min_main`.
std::vector<uint64_t> probe_working_sets(const std::vector<MemoryLevel>& levels, uint64_t min_main);

// Gives each level its ceiling from the probe's reads: the best read whose working set fits in
// the level and not in the one before; main memory's from the sets beyond 4x the last cache.
// Levels that no read reached are dropped; a level measured slower than the one behind it takes
// that one's ceiling.
void assign_ceilings(std::vector<MemoryLevel>* levels, const std::vector<ReadProbe>& curve);

// The index of the level whose capacity first holds `bytes`; main memory's when none does.
size_t level_holding(const std::vector<MemoryLevel>& levels, uint64_t bytes);

// note: each ceiling is the best repetition, as STREAM reports bandwidth: a ceiling is what the
// machine can do, and on a shared machine the slower repetitions measure the neighbours. The
// bench's own figures are means, so a row's fraction of the ceiling is, if anything, modest.
struct Roofline {
  std::vector<MemoryLevel> levels;  // fastest first; the last is main memory
  std::vector<ReadProbe> curve;     // every working set the probe streamed, smallest first
  double peak_gflops = 0.0;         // best repetition of the best product shape
  DType dtype = DType::f32;         // of the product's weights
  int64_t gemm_size = 0;            // n: the products are (n x n) x (n x n)^T and (256 x 2n) x (2n x 2n)^T

  const MemoryLevel& main_memory() const { return levels.back(); }
  // The ceiling a step reading `bytes` is compared with.
  const MemoryLevel& level_for(uint64_t bytes) const { return levels[level_holding(levels, bytes)]; }
  std::string describe() const;  // one line for the bench header: every level, then the peak
  std::string describe_curve() const;  // one line: "1 MiB 150.2, 2 MiB 160.1, ... GB/s"
};

// Streams `bytes` of a buffer `reps` times, each repetition reading it as often as it takes to
// move at least 256 MiB; returns the best GB/s (1e9 bytes/s). `buffer` holds at least `bytes`.
double measure_read_bandwidth(Backend& backend, const Tensor& buffer, uint64_t bytes, int reps);
// A product of (m x n) by (n x n)^T: 2 m n^2 FLOPs.
struct MatmulShape {
  int64_t m, n;
};
// Times every shape once per round, in turn, for `rounds` rounds (after one untimed product
// each); returns the best GFLOP/s of them all.
double measure_matmul_gflops(Backend& backend, const std::vector<MatmulShape>& shapes, DType dtype, int rounds);
// The cache levels of the device `backend` runs on (CPU: the OS's; CUDA: the GPU's L2).
std::vector<MemoryLevel> device_memory_levels(Backend& backend);
// Every level's ceiling and the matmul peak, with sizes chosen for the device (CPU: n = 2048;
// CUDA: n = 8192).
Roofline measure_roofline(Backend& backend, DType dtype);

// The communication row of a split model's ceiling (tensor parallelism, engine/communicator.h):
// the seconds of one all-reduce of `floats` f32 between the ranks, in `backend`'s memory (the
// ranks' device), the best of 5 repetitions of 20. A collective: every rank calls it with the
// same count.
double measure_all_reduce_seconds(Communicator& ranks, Backend& backend, int64_t floats);

// Why a step of `bytes` read at `gbps` is over the ceiling of the level it is compared with, e.g.
// "over: part of the 290.0 MB step stays in the 260 MiB L3"; empty when it is not over.
std::string over_ceiling_reason(const Roofline& roofline, uint64_t bytes, double gbps);

}  // namespace minfer
