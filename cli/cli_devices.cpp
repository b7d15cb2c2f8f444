// `minfer devices`: what the engine sees.
#include <cstdio>

#include "engine/cpu_info.h"
#include "core/device.h"
#include "cli/args.h"
#include "cli/commands.h"

namespace minfer::cli {

int cmd_devices(int argc, char** argv) {
  Args args("devices", "Prints the GPUs and the CPU the engine can use.", {});
  args.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::printf("%s", args.usage().c_str());
    return 0;
  }
  std::printf("build: %s\n", cuda_build_info().c_str());
  std::string reason;
  int n = cuda_device_count(&reason);
  if (n == 0) std::printf("cuda: no device (%s)\n", reason.c_str());
  int index = 0;
  for (const CudaDeviceInfo& d : cuda_devices()) {
    std::printf("cuda:%d: %s, compute capability %d.%d, %d SMs\n", index++, d.name.c_str(), d.major, d.minor, d.sms);
    std::printf("  memory: %.1f GiB (%.1f GiB free), L2 %.1f MiB, theoretical bandwidth %.0f GB/s\n",
                double(d.memory_bytes) / double(1ull << 30), double(d.free_bytes) / double(1ull << 30),
                double(d.l2_bytes) / double(1 << 20), d.bandwidth_gbps);
    std::printf("  tensor cores: %s\n", d.tensor_core_note.c_str());
  }
  CpuInfo cpu = cpu_info();
  std::printf("cpu: %s, %d logical cores\n", cpu.model.c_str(), cpu.logical_cores);
  std::printf("  simd: %s (kernels compiled for %s)\n", cpu.simd.c_str(), cpu.compiled.c_str());
  std::string caches;
  for (const CacheInfo& c : cpu.caches)
    caches += (caches.empty() ? "" : ", ") + std::string("L") + std::to_string(c.level) + (c.level == 1 ? "d " : " ") +
              std::to_string(c.bytes >> 10) + " KiB" +
              (c.cpus_sharing > 1 ? " shared by " + std::to_string(c.cpus_sharing) + " CPUs" : " per core");
  std::printf("  caches: %s\n", caches.empty() ? "not reported by the OS" : caches.c_str());
  return 0;
}

}  // namespace minfer::cli
