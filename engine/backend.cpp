#include "engine/backend.h"

#include "engine/backend_cpu.h"
#include "engine/backend_ref.h"
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

void Backend::check_weights(DType t, const std::string& model) const {
  if (t == DType::i32) fail(model, ": weights must be of a float or quantized type, not i32");
}

void check_memory_fits(Backend& backend, uint64_t bytes, const std::string& what) {
  size_t free_bytes = 0, total_bytes = 0;
  if (backend.pool().upstream().memory_info(&free_bytes, &total_bytes) && bytes > free_bytes)
    fail(what, " needs ", bytes, " bytes, ", free_bytes, " of ", total_bytes, " are free on ",
         device_name(backend.device()));
}

const char* backend_kind_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::ref: return "ref";
    case BackendKind::cpu: return "cpu";
    case BackendKind::cuda: return "cuda";
  }
  return "?";
}

BackendKind parse_backend_kind(const std::string& name) {
  if (name == "ref") return BackendKind::ref;
  if (name == "cpu") return BackendKind::cpu;
  if (name == "cuda") {
    require_cuda();
    return BackendKind::cuda;
  }
  std::string reason;
  if (name == "auto") return cuda_device_count(&reason) > 0 ? BackendKind::cuda : BackendKind::cpu;
  fail("--device: '", name, "' is not ref, cpu, cuda or auto");
}

std::unique_ptr<Backend> make_backend(BackendKind kind, const BackendOptions& options) {
  if (kind == BackendKind::ref) return std::make_unique<RefBackend>();
  if (kind == BackendKind::cpu) return std::make_unique<CpuBackend>(options);
  require_cuda();
#if MINFER_HAVE_CUDA
  return make_cuda_backend(options);
#else
  fail("no CUDA device: this build has no CUDA backend");
#endif
}

#if !MINFER_HAVE_CUDA
void* cuda_stream_of(Backend& backend) { fail("a CUDA stream is asked of the ", backend.name(), " backend"); }
void use_on_this_thread(Backend&) {}
#endif

}  // namespace minfer
