#include <cublas_v2.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "core/cuda_check.cuh"
#include "core/device.h"
#include "kernels/ref/fill.h"
#include "lessons/cuda_lessons.h"

namespace minfer::demo::cuda_lessons {

namespace {

// Median milliseconds of `reps` runs of `fn` on the default stream, after one warm-up.
double median_ms(int reps, const std::function<void()>& fn) {
  require_cuda();
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  fn();
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaEventRecord(start));
    fn();
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { CUDA_CHECK(cudaMalloc(&p, bytes)); }
  ~DeviceBuffer() { cudaFree(p); }
};

__global__ void fill_random(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = ref::uniform_at(7, uint64_t(i), -1.0f, 1.0f);
}

// Each side does 64 dependent FMAs with its own constants: neither side is free.
__global__ void branchy(float* x, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  if (v > 0.0f) {
    for (int k = 0; k < 64; ++k) v = v * 0.999f + 0.001f;
  } else {
    for (int k = 0; k < 64; ++k) v = v * 1.001f - 0.002f;
  }
  x[i] = v;
}

// The same result, computed by every thread for both constants and selected without a branch.
__global__ void branchless(float* x, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  const bool positive = v > 0.0f;
  const float a = positive ? 0.999f : 1.001f, b = positive ? 0.001f : -0.002f;
  for (int k = 0; k < 64; ++k) v = v * a + b;
  x[i] = v;
}

// Lane l takes path l % paths; each path is 256 dependent FMAs with constants of its own.
__global__ void warp_paths(float* out, int paths) {
  const int lane = threadIdx.x % 32;
  float v = static_cast<float>(threadIdx.x);
  for (int p = 0; p < paths; ++p)
    if (lane % paths == p) {
      const float a = 1.0f - 1e-4f * (p + 1), b = 1e-3f * (p + 1);
      for (int k = 0; k < 256; ++k) v = v * a + b;
    }
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

__global__ void empty_kernel() {}

}  // namespace

double branch_kernel_seconds(int64_t n, bool branchless_form) {
  DeviceBuffer x(size_t(n) * 4);
  fill_random<<<1024, 256>>>(static_cast<float*>(x.p), n);
  CUDA_CHECK(cudaGetLastError());
  const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  return median_ms(10, [&] {
           if (branchless_form) branchless<<<blocks, 256>>>(static_cast<float*>(x.p), n);
           else branchy<<<blocks, 256>>>(static_cast<float*>(x.p), n);
         }) / 1e3;
}

double warp_paths_seconds(int paths) {
  const unsigned blocks = 1024, threads = 256;
  DeviceBuffer out(size_t(blocks) * threads * 4);
  return median_ms(10, [&] { warp_paths<<<blocks, threads>>>(static_cast<float*>(out.p), paths); }) / 1e3;
}

double empty_kernels_seconds(int n, bool graph) {
  require_cuda();
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < n; ++i) empty_kernel<<<1, 32, 0, stream>>>();
    CUDA_CHECK(cudaStreamEndCapture(stream, &g));
    CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
  }
  std::vector<double> seconds;
  for (int r = 0; r < 11; ++r) {
    auto start = std::chrono::steady_clock::now();
    if (graph) {
      CUDA_CHECK(cudaGraphLaunch(exec, stream));
    } else {
      for (int i = 0; i < n; ++i) empty_kernel<<<1, 32, 0, stream>>>();
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  if (exec) CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaStreamDestroy(stream));
  std::sort(seconds.begin() + 1, seconds.end());  // the first run warms up
  return seconds[6];
}

double host_copy_gbps(uint64_t bytes, bool to_device, bool pinned) {
  DeviceBuffer device(bytes);
  void* host = nullptr;
  if (pinned) {
    CUDA_CHECK(cudaMallocHost(&host, bytes));
  } else {
    host = std::malloc(bytes);
    MINFER_CHECK(host != nullptr, "host_copy_gbps: cannot allocate ", bytes, " bytes");
  }
  std::memset(host, 1, bytes);  // fault the pages in before timing
  const double ms = median_ms(5, [&] {
    if (to_device) CUDA_CHECK(cudaMemcpy(device.p, host, bytes, cudaMemcpyHostToDevice));
    else CUDA_CHECK(cudaMemcpy(host, device.p, bytes, cudaMemcpyDeviceToHost));
  });
  if (pinned) CUDA_CHECK(cudaFreeHost(host)); else std::free(host);
  return double(bytes) / (ms / 1e3) / 1e9;
}

double device_copy_gbps(uint64_t bytes) {
  DeviceBuffer a(bytes), b(bytes);
  const double ms = median_ms(10, [&] { CUDA_CHECK(cudaMemcpy(b.p, a.p, bytes, cudaMemcpyDeviceToDevice)); });
  return 2.0 * double(bytes) / (ms / 1e3) / 1e9;
}

double tf32_sgemm_seconds(int64_t n) {
  DeviceBuffer a(size_t(n * n) * 4), b(size_t(n * n) * 4), c(size_t(n * n) * 4);
  fill_random<<<1024, 256>>>(static_cast<float*>(a.p), n * n);
  fill_random<<<1024, 256>>>(static_cast<float*>(b.p), n * n);
  CUDA_CHECK(cudaGetLastError());
  cublasHandle_t handle;
  CUBLAS_CHECK(cublasCreate(&handle));
  CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH));
  const float alpha = 1.0f, beta = 0.0f;
  const int ni = static_cast<int>(n);
  const double ms = median_ms(5, [&] {
    CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, ni, ni, ni, &alpha, static_cast<float*>(a.p), ni,
                             static_cast<float*>(b.p), ni, &beta, static_cast<float*>(c.p), ni));
  });
  CUBLAS_CHECK(cublasDestroy(handle));
  return ms / 1e3;
}

Peaks datasheet_peaks() {
  Peaks p;
  std::vector<CudaDeviceInfo> devices = cuda_devices();
  if (devices.empty()) return p;
  const std::string& name = devices[0].name;
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) {
    p = {67, 495, 989, "H100/H200 SXM data sheet, dense"};
  } else if (name.find("A100") != std::string::npos) {
    p = {19.5, 156, 312, "A100 data sheet, dense"};
  }
  return p;
}

}  // namespace minfer::demo::cuda_lessons
