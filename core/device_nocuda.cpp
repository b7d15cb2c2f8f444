// The CPU-only build's answers to core/device.h: there is no CUDA device, and asking for one is
// an error that says why.
#include <cstring>

#include "core/device.h"
#include "core/error.h"

namespace minfer {

std::vector<CudaDeviceInfo> cuda_devices() { return {}; }

std::string cuda_build_info() { return "no CUDA backend (built without nvcc)"; }

int cuda_device_count(std::string* reason) {
  if (reason != nullptr) *reason = "this build of minfer has no CUDA backend (built without nvcc)";
  return 0;
}

void copy_bytes(void* dst, DeviceKind dst_device, const void* src, DeviceKind src_device,
                size_t bytes) {
  if (dst_device != DeviceKind::cpu || src_device != DeviceKind::cpu) require_cuda();
  if (bytes > 0) std::memmove(dst, src, bytes);
}

std::unique_ptr<Upstream> make_cuda_device_upstream() {
  require_cuda();
  return nullptr;
}

std::unique_ptr<Upstream> make_cuda_pinned_upstream() {
  require_cuda();
  return nullptr;
}

void trace_push(const char*) {}
void trace_pop() {}

}  // namespace minfer
