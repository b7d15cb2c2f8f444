#include "engine/backend.h"

#include "engine/backend_cpu.h"
#include "core/error.h"

namespace minfer {

const char* gemm_name(GemmKind g) {
  switch (g) {
    case GemmKind::naive: return "naive";
    case GemmKind::tiled: return "tiled";
    case GemmKind::mma: return "mma";
    case GemmKind::cublas: return "cublas";
  }
  return "?";
}

GemmKind parse_gemm(const std::string& name) {
  for (GemmKind g : {GemmKind::naive, GemmKind::tiled, GemmKind::mma, GemmKind::cublas})
    if (name == gemm_name(g)) return g;
  fail("unknown --gemm '", name, "' (expected naive, tiled, mma or cublas)");
}

#if MINFER_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);  // backend_cuda.cu
#endif

std::unique_ptr<Backend> make_backend(DeviceKind device, const BackendOptions& options) {
  if (device == DeviceKind::cpu) return std::make_unique<CpuBackend>(options);
  require_cuda();
#if MINFER_HAVE_CUDA
  return make_cuda_backend(options);
#else
  fail("no CUDA device: this build has no CUDA backend");
#endif
}

}  // namespace minfer
