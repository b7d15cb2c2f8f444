// Devices and the few runtime services the tensor library needs from CUDA: whether a GPU is
// there, byte copies between host and device, and upstreams for the caching pool. The same
// declarations are implemented by device_cuda.cu in a CUDA build and by device_nocuda.cpp in a
// CPU-only build, so code that uses these services does not include the CUDA headers.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/pool.h"

namespace minfer {

enum class DeviceKind { cpu, cuda };
const char* device_name(DeviceKind d);

// What this build holds: "CUDA backend for sm_90 (CUDA 13.0)" or "no CUDA backend (...)".
std::string cuda_build_info();

// Number of usable CUDA devices; 0 with `reason` set when there are none. Any error from the
// runtime (no driver, driver too old, no device) counts as "no GPU" and is cleared.
int cuda_device_count(std::string* reason);
// Throws Error("no CUDA device: <reason>") unless a device is usable.
void require_cuda();

// What `minfer devices` reports about a GPU.
struct CudaDeviceInfo {
  std::string name;
  int major = 0, minor = 0;        // compute capability
  int sms = 0;
  size_t memory_bytes = 0, free_bytes = 0;
  int l2_bytes = 0;
  double bandwidth_gbps = 0.0;     // theoretical: 2 x memory clock x bus width
  bool f16_tensor_cores = false;
  std::string tensor_core_note;    // which instructions, or why there are none
};
std::vector<CudaDeviceInfo> cuda_devices();  // empty without a usable device

// Copies `bytes` bytes; either side may be on either device. Synchronous with respect to all
// device work: ordered after every kernel enqueued so far, complete when it returns.
void copy_bytes(void* dst, DeviceKind dst_device, const void* src, DeviceKind src_device,
                size_t bytes);

// Upstreams for the CUDA pools (cudaMalloc and cudaMallocHost); throw in a CPU-only build.
std::unique_ptr<Upstream> make_cuda_device_upstream();
std::unique_ptr<Upstream> make_cuda_pinned_upstream();

// Named ranges for profilers (NVTX in a CUDA build, so an Nsight Systems trace reads like the
// code; nothing otherwise). Use through TraceRange.
void trace_push(const char* name);
void trace_pop();

class TraceRange {
 public:
  explicit TraceRange(const char* name) { trace_push(name); }
  ~TraceRange() { trace_pop(); }
  TraceRange(const TraceRange&) = delete;
  TraceRange& operator=(const TraceRange&) = delete;
};

}  // namespace minfer
