// The CPU-only build's answer to every GPU experiment: there is no device.
#include "core/device.h"
#include "lessons/cuda_lessons.h"

namespace minfer::demo::cuda_lessons {

double branch_kernel_seconds(int64_t, bool) { require_cuda(); return 0.0; }
double warp_paths_seconds(int) { require_cuda(); return 0.0; }
double empty_kernels_seconds(int, bool) { require_cuda(); return 0.0; }
double host_copy_gbps(uint64_t, bool, bool) { require_cuda(); return 0.0; }
double device_copy_gbps(uint64_t) { require_cuda(); return 0.0; }
double tf32_sgemm_seconds(int64_t) { require_cuda(); return 0.0; }
Peaks datasheet_peaks() { return {}; }

}  // namespace minfer::demo::cuda_lessons
