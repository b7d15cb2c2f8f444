// The CUDA build's answers to core/device.h: device discovery, copies, and the cudaMalloc and
// cudaMallocHost upstreams of the caching pools.
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "core/checked.h"
#include "core/cuda_check.cuh"
#include "core/device.h"

namespace minfer {

namespace cuda {

void fail_cuda(cudaError_t status, const char* call, const char* file, int line) {
  fail("CUDA error at ", file, ":", line, ": ", call, ": ", cudaGetErrorString(status));
}

void fail_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  fail("cuBLAS error at ", file, ":", line, ": ", call, ": ", cublasGetStatusString(status));
}

}  // namespace cuda

std::string cuda_build_info() {
  std::string archs = MINFER_CUDA_ARCHS;  // CMAKE_CUDA_ARCHITECTURES, e.g. "80,90"
  std::string list;
  for (size_t start = 0; start <= archs.size();) {
    size_t end = archs.find(',', start);
    if (end == std::string::npos) end = archs.size();
    if (end > start) list += (list.empty() ? "sm_" : ", sm_") + archs.substr(start, end - start);
    start = end + 1;
  }
  return "CUDA backend for " + list + " (CUDA " + std::to_string(CUDART_VERSION / 1000) + "." +
         std::to_string(CUDART_VERSION % 1000 / 10) + ")";
}

int cuda_device_count(std::string* reason) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    if (reason != nullptr) *reason = cudaGetErrorString(status);
    (void)cudaGetLastError();  // clear the sticky error so later calls start clean
    return 0;
  }
  if (count == 0 && reason != nullptr) *reason = "the CUDA runtime reports no devices";
  return count;
}

std::vector<CudaDeviceInfo> cuda_devices() {
  std::vector<CudaDeviceInfo> devices;
  std::string reason;
  const int count = cuda_device_count(&reason);
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, d));
    CudaDeviceInfo info;
    info.name = prop.name;
    info.major = prop.major;
    info.minor = prop.minor;
    info.sms = prop.multiProcessorCount;
    info.memory_bytes = prop.totalGlobalMem;
    info.l2_bytes = prop.l2CacheSize;
    int clock_khz = 0, bus_bits = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, d));
    CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, d));
    info.bandwidth_gbps = 2.0 * double(clock_khz) * 1e3 * double(bus_bits) / 8.0 / 1e9;
    int previous = 0;
    CUDA_CHECK(cudaGetDevice(&previous));
    CUDA_CHECK(cudaSetDevice(d));
    size_t free_bytes = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    CUDA_CHECK(cudaSetDevice(previous));
    info.free_bytes = free_bytes;
    info.f16_tensor_cores = prop.major >= 7;
    info.tensor_core_note = prop.major >= 9   ? "f16/bf16 Tensor Cores (mma.sync, wgmma)"
                            : prop.major >= 8 ? "f16/bf16 Tensor Cores (mma.sync)"
                            : prop.major == 7 ? "f16 Tensor Cores (mma.sync)"
                                              : "no f16 Tensor Cores: they arrived with compute capability 7.0";
    devices.push_back(info);
  }
  return devices;
}

void copy_bytes(void* dst, DeviceKind dst_device, const void* src, DeviceKind src_device,
                size_t bytes) {
  if (bytes == 0) return;
  if (dst_device == DeviceKind::cpu && src_device == DeviceKind::cpu) {
    std::memmove(dst, src, bytes);
    return;
  }
  require_cuda();
  // note: backends run their kernels on non-blocking streams, which the legacy stream that
  // cudaMemcpy uses does not wait for, and a pageable host-to-device cudaMemcpy may return before
  // its DMA ends. Synchronising the device on both sides makes this copy what it says: ordered
  // after all work so far and finished when it returns. Hot paths use Backend::copy_async.
  CUDA_CHECK(cudaDeviceSynchronize());
  // cudaMemcpyDefault lets unified addressing work out the direction from the pointers.
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  CUDA_CHECK(cudaDeviceSynchronize());
}

namespace {

// The release of a segment, from the status of cudaFree or cudaFreeHost. At process exit the
// runtime may unload before a static pool is destroyed: then the driver reclaims everything, and
// that is not an error. Anything else is reported on stderr and counted by the pool; it never
// throws, since it runs in destructors.
Release release_status(cudaError_t status, const char* call, size_t bytes) noexcept {
  if (status == cudaSuccess) return Release::freed;
  (void)cudaGetLastError();  // clear it, so that it does not surface at the next unrelated check
  if (status == cudaErrorCudartUnloading || status == cudaErrorContextIsDestroyed) return Release::shutting_down;
  std::fprintf(stderr, "minfer: warning: %s of a %zu-byte segment failed: %s\n", call, bytes,
               cudaGetErrorString(status));
  return Release::failed;
}

// A failed cudaMalloc or cudaMallocHost: nullptr when the memory is exhausted (that error is
// cleared), else Error naming the status. A sticky error (an earlier kernel's fault) fails every
// later call, and reporting it as "out of memory" would hide the fault.
void* allocation_failed(cudaError_t status, const char* call, size_t bytes) {
  const bool out_of_memory = status == cudaErrorMemoryAllocation;
  if (out_of_memory) (void)cudaGetLastError();
  return refused_allocation(out_of_memory, call, bytes, cudaGetErrorName(status), cudaGetErrorString(status));
}

class DeviceUpstream final : public Upstream {
 public:
  void* allocate(size_t bytes) override {
    // note: refuse a request larger than the free memory up front, so the error states the
    // numbers instead of coming back from cudaMalloc as a bare "out of memory".
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess && bytes > free_bytes)
      return nullptr;
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, bytes);
    return status == cudaSuccess ? ptr : allocation_failed(status, "cudaMalloc", bytes);
  }
  Release deallocate(void* ptr, size_t bytes) noexcept override {
    return release_status(cudaFree(ptr), "cudaFree", bytes);
  }
  std::string name() const override { return "cuda device"; }
  bool memory_info(size_t* free_bytes, size_t* total_bytes) const override {
    return cudaMemGetInfo(free_bytes, total_bytes) == cudaSuccess;
  }
};

class PinnedUpstream final : public Upstream {
 public:
  void* allocate(size_t bytes) override {
    void* ptr = nullptr;
    const cudaError_t status = cudaMallocHost(&ptr, bytes);
    return status == cudaSuccess ? ptr : allocation_failed(status, "cudaMallocHost", bytes);  // page-aligned
  }
  Release deallocate(void* ptr, size_t bytes) noexcept override {
    return release_status(cudaFreeHost(ptr), "cudaFreeHost", bytes);
  }
  std::string name() const override { return "cuda pinned host"; }
};

}  // namespace

void trace_push(const char* name) { nvtxRangePushA(name); }
void trace_pop() { nvtxRangePop(); }

std::unique_ptr<Upstream> make_cuda_device_upstream() {
  require_cuda();
  return std::make_unique<DeviceUpstream>();
}

std::unique_ptr<Upstream> make_cuda_pinned_upstream() {
  require_cuda();
  return std::make_unique<PinnedUpstream>();
}

}  // namespace minfer
