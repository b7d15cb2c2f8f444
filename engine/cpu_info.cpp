#include "engine/cpu_info.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "kernels/cpu/simd.h"

namespace minfer {

namespace {

std::string cache_file(int index, const char* name) {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/" + name);
  std::string text;
  in >> text;
  return text;
}

// A cache size such as "32K" or "2048K".
size_t parse_cache_size(const std::string& text) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return 0;
  size_t value = std::stoull(text);
  char unit = text.back();
  return unit == 'K' ? value << 10 : unit == 'M' ? value << 20 : value;
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
    const std::string level_text = cache_file(i, "level"), type = cache_file(i, "type");
    if (level_text.empty() || type == "Instruction") continue;
    CacheInfo cache;
    cache.level = std::atoi(level_text.c_str());
    cache.bytes = parse_cache_size(cache_file(i, "size"));
    cache.cpus_sharing = std::max(1, count_cpu_list(cache_file(i, "shared_cpu_list")));
    if (cache.level < 1 || cache.bytes == 0) continue;
    if (cache.level == 1) info.l1d_bytes = cache.bytes;
    if (cache.level == 2) info.l2_bytes = cache.bytes;
    if (cache.level == 3) info.l3_bytes = cache.bytes;
    info.caches.push_back(cache);
  }
  std::sort(info.caches.begin(), info.caches.end(),
            [](const CacheInfo& a, const CacheInfo& b) { return a.level < b.level; });
  return info;
}

int count_cpu_list(const std::string& list) {
  int64_t count = 0;
  std::stringstream ranges(list);
  std::string range;
  while (std::getline(ranges, range, ',')) {
    int first = 0, last = 0;
    char dash = 0;
    std::stringstream in(range);
    if (!(in >> first)) return 0;
    last = first;
    if (in >> dash && (dash != '-' || !(in >> last))) return 0;
    if (first < 0 || last < first) return 0;
    count += int64_t(last) - first + 1;
    if (count > (1 << 20)) return 0;  // no machine has that many CPUs: not a CPU list
  }
  return static_cast<int>(count);
}

}  // namespace minfer
