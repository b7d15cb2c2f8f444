// What the CPU is: its name, core count, SIMD features and cache sizes (for `minfer devices`, the
// bench's JSON records, the demos' tables and the cache levels of the roofline).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace minfer {

// One data (or unified) cache level as the OS describes cpu0's.
struct CacheInfo {
  int level = 0;           // 1, 2, 3
  size_t bytes = 0;        // one instance
  int cpus_sharing = 1;    // logical CPUs that share one instance (1: private to a core)
};

struct CpuInfo {
  std::string model;     // e.g. "AMD EPYC"
  int logical_cores = 0;
  std::string simd;      // features this CPU has, e.g. "avx2 fma f16c avx512f avx512_bf16"
  std::string compiled;  // the vector instruction set the kernels were compiled for
  size_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;  // per the OS; 0 where it does not say
  std::vector<CacheInfo> caches;  // data and unified levels, lowest first; empty where the OS says nothing
};

CpuInfo cpu_info();

// The number of CPUs in a sysfs CPU list such as "0-3,8,10-11" (7); 0 for text that is not one.
int count_cpu_list(const std::string& list);

}  // namespace minfer
