// What the CPU is: its name, core count, SIMD features and cache sizes (for `minfer devices`, the
// bench's JSON records and the demos' tables).
#pragma once

#include <cstddef>
#include <string>

namespace minfer {

struct CpuInfo {
  std::string model;     // e.g. "AMD EPYC"
  int logical_cores = 0;
  std::string simd;      // features this CPU has, e.g. "avx2 fma f16c avx512f avx512_bf16"
  std::string compiled;  // the vector instruction set the kernels were compiled for
  size_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;  // per the OS; 0 where it does not say
};

CpuInfo cpu_info();

}  // namespace minfer
