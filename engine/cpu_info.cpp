#include "engine/cpu_info.h"

#include <fstream>
#include <sstream>
#include <thread>

#include "kernels/cpu/simd.h"

namespace minfer {

namespace {

// Reads a cache size such as "32K" or "2048K" from sysfs.
size_t read_cache_size(int index) {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
  std::string text;
  if (!(in >> text) || text.empty()) return 0;
  size_t value = std::stoull(text);
  char unit = text.back();
  return unit == 'K' ? value << 10 : unit == 'M' ? value << 20 : value;
}

std::string read_cache_type(int index) {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/type");
  std::string type;
  in >> type;
  return type;
}

int read_cache_level(int index) {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/level");
  int level = 0;
  in >> level;
  return level;
}

}  // namespace

CpuInfo cpu_info() {
  CpuInfo info;
  info.logical_cores = static_cast<int>(std::thread::hardware_concurrency());
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(cpuinfo, line)) {
    if (info.model.empty() && line.rfind("model name", 0) == 0)
      info.model = line.substr(line.find(':') + 2);
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = " " + line.substr(line.find(':') + 2) + " ";
  }
  for (const char* f : {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                        "avx512_bf16", "avx512_fp16", "amx_bf16", "neon", "asimd"}) {
    if (flags.find(std::string(" ") + f + " ") != std::string::npos)
      info.simd += (info.simd.empty() ? "" : " ") + std::string(f);
  }
  info.compiled = cpu::simd::name();
  for (int i = 0; i < 8; ++i) {
    int level = read_cache_level(i);
    if (level == 0) continue;
    size_t size = read_cache_size(i);
    if (level == 1 && read_cache_type(i) == "Data") info.l1d_bytes = size;
    if (level == 2) info.l2_bytes = size;
    if (level == 3) info.l3_bytes = size;
  }
  return info;
}

}  // namespace minfer
