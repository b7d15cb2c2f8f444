// demo transfer: the transfer tax and the memory hierarchy's cliffs.
// CPU: memcpy bandwidth by buffer size; a buffer that fits in L1, L2 or L3 copies several times
// faster than one that must come from DRAM, and each cache size is a cliff.
// CUDA: host-to-device and device-to-host copies of 1 to 500 MB from pageable and from pinned
// memory (pinned memory can be read by the GPU's copy engines directly; pageable memory is
// staged through a pinned buffer by the driver), next to a device-to-device copy in HBM.
#include <cstring>

#include "engine/cpu_info.h"
#include "lessons/cuda_lessons.h"
#include "lessons/demos.h"

namespace minfer::demo {

void transfer(const Options& o) {
  Report r("transfer", "copies: the cache cliffs of the CPU, and PCIe against HBM on the GPU");
  const CpuInfo cpu = cpu_info();
  std::vector<std::vector<std::string>> rows;
  double l1_rate = 0, dram_rate = 0;
  const int64_t largest = o.quick ? (int64_t(64) << 20) : (int64_t(512) << 20);
  std::vector<char> src(static_cast<size_t>(largest)), dst(static_cast<size_t>(largest));
  std::memset(src.data(), 1, src.size());
  std::memset(dst.data(), 2, dst.size());
  for (int64_t bytes = 4096; bytes <= largest; bytes *= 4) {
    const int64_t repeats = std::max<int64_t>(1, (int64_t(o.quick ? 64 : 256) << 20) / bytes);
    const double seconds = median_seconds(5, [&] {
      for (int64_t i = 0; i < repeats; ++i) {
        std::memcpy(dst.data(), src.data(), static_cast<size_t>(bytes));
        __asm__ volatile("" ::: "memory");
      }
    });
    const double gbps = double(bytes) * double(repeats) / seconds / 1e9;
    const char* level = bytes <= int64_t(cpu.l1d_bytes) / 2 ? "L1" : bytes <= int64_t(cpu.l2_bytes) / 2 ? "L2"
                        : bytes <= int64_t(cpu.l3_bytes) / 2 ? "L3" : "DRAM";
    if (bytes == 4096) l1_rate = gbps;
    dram_rate = gbps;
    rows.push_back({fmt("%.0f KiB", double(bytes) / 1024.0), level, fmt("%.1f", gbps)});
    r.point("cpu", "memcpy (one thread)", double(bytes), gbps, level);
  }
  std::printf("caches: L1d %zu KiB, L2 %zu KiB, L3 %zu KiB (source and destination both count)\n", cpu.l1d_bytes >> 10,
              cpu.l2_bytes >> 10, cpu.l3_bytes >> 10);
  print_table({"buffer", "fits in", "GB/s copied"}, rows);
  r.ran("cpu");
  r.conclude("cpu", fmt("a copy inside L1 runs at %.0f GB/s", l1_rate) +
                        fmt(", one that must stream from DRAM at %.0f GB/s", dram_rate) +
                        fmt(": %.0fx, falling at each cache size", l1_rate / dram_rate));

  if (!o.cuda) {
    r.skipped("cuda", "no CUDA device (" + o.cuda_reason + ")");
  } else {
    std::vector<std::vector<std::string>> gpu_rows;
    double pinned_h2d = 0, pageable_h2d = 0;
    for (int64_t mb : {1, 10, 100, 500}) {
      const uint64_t bytes = uint64_t(mb) << 20;
      const double h2d_page = cuda_lessons::host_copy_gbps(bytes, true, false);
      const double h2d_pin = cuda_lessons::host_copy_gbps(bytes, true, true);
      const double d2h_page = cuda_lessons::host_copy_gbps(bytes, false, false);
      const double d2h_pin = cuda_lessons::host_copy_gbps(bytes, false, true);
      r.point("cuda", "host to device, pageable", double(bytes), h2d_page);
      r.point("cuda", "host to device, pinned", double(bytes), h2d_pin);
      r.point("cuda", "device to host, pageable", double(bytes), d2h_page);
      r.point("cuda", "device to host, pinned", double(bytes), d2h_pin);
      gpu_rows.push_back({std::to_string(mb) + " MB", fmt("%.1f", h2d_page), fmt("%.1f", h2d_pin), fmt("%.1f", d2h_page),
                          fmt("%.1f", d2h_pin)});
      pinned_h2d = h2d_pin;
      pageable_h2d = h2d_page;
    }
    const double hbm = cuda_lessons::device_copy_gbps(uint64_t(500) << 20);
    r.point("cuda", "device to device (HBM)", double(uint64_t(500) << 20), hbm);
    print_table({"size", "H2D pageable GB/s", "H2D pinned", "D2H pageable", "D2H pinned"}, gpu_rows);
    std::printf("device to device, 500 MB: %.0f GB/s (read + write)\n", hbm);
    r.ran("cuda");
    r.conclude("cuda", fmt("pinned host memory crosses PCIe at %.0f GB/s", pinned_h2d) +
                           fmt(" against %.0f from pageable memory", pageable_h2d) +
                           fmt("; HBM moves %.0f GB/s", hbm) +
                           fmt(", %.0fx PCIe: keep the weights and the KV cache on the GPU", hbm / pinned_h2d));
  }
  r.axes("bytes", "GB/s", true, true);
  r.write(o.out_dir);
}

}  // namespace minfer::demo
