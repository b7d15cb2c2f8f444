#include "core/device.h"

#include "core/error.h"

namespace minfer {

const char* device_name(DeviceKind d) { return d == DeviceKind::cuda ? "cuda" : "cpu"; }

void require_cuda() {
  std::string reason;
  if (cuda_device_count(&reason) <= 0) fail("no CUDA device: ", reason);
}

}  // namespace minfer
