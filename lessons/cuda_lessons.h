// The raw CUDA experiments behind the GPU halves of the demos: things no decoder op does (an
// empty kernel, a branchy kernel, copies from pageable memory). Implemented in cuda_lessons.cu
// in a CUDA build and by cuda_lessons_none.cpp (every call: Error "no CUDA device") otherwise.
// Times are medians of several repetitions, measured with CUDA events, except the empty kernels'
// launches (empty_kernels_seconds), timed on the host clock around a synchronize.
#pragma once

#include <cstdint>
#include <string>

namespace minfer::demo::cuda_lessons {

// An element-wise kernel over n floats whose work depends on each value (random data: half the
// threads of a warp take each side), or its branchless form. Seconds per launch.
double branch_kernel_seconds(int64_t n, bool branchless);
// A kernel where the 32 lanes of every warp take `paths` different paths of equal work
// (lane % paths); a warp runs its paths one after the other. Seconds per launch.
double warp_paths_seconds(int paths);
// `n` empty kernels launched one by one, or captured once in a CUDA Graph and launched as one.
// Seconds for all n.
double empty_kernels_seconds(int n, bool graph);
// Copy bandwidth in GB/s: host to device or back, from pageable (malloc) or pinned memory; and
// device to device (counting bytes read plus bytes written).
double host_copy_gbps(uint64_t bytes, bool to_device, bool pinned);
double device_copy_gbps(uint64_t bytes);
// An n x n x n SGEMM through cuBLAS with TF32 Tensor Cores allowed. Seconds.
double tf32_sgemm_seconds(int64_t n);

// The data-sheet dense peaks (TFLOP/s) of the known parts, 0 where unknown.
struct Peaks {
  double f32 = 0, tf32 = 0, f16 = 0;
  std::string source;
};
Peaks datasheet_peaks();

}  // namespace minfer::demo::cuda_lessons
