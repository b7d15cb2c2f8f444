// The CUDA backend: every op on one stream, memory from caching pools over cudaMalloc (device)
// and cudaMallocHost (pinned host memory for transfers), kernels from kernels/cuda/, matrix
// products through the kernels or cuBLAS/cuBLASLt, and decode steps recorded as CUDA Graphs.
//
// Scratch buffers (16-bit copies of activations, attention scores and partial states) grow on first
// use and are then reused; the first run of a recorded step is a normal run precisely so that
// this growth, and cuBLASLt's algorithm queries, happen before anything is captured. A scratch
// buffer that grows later (a larger request) moves, and every recording is invalidated before the
// old buffer is freed (RecordingCache::grow in engine/recordings.h).
#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/cuda_choices.h"
#include "core/cuda_check.cuh"
#include "core/error.h"
#include "engine/op_checks.h"
#include "engine/recordings.h"
#include "kernels/cuda/add.cuh"
#include "kernels/cuda/argmax.cuh"
#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/attention_prefill.cuh"
#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/gather_rows.cuh"
#include "kernels/cuda/fill.cuh"
#include "kernels/cuda/gemm_cublas.cuh"
#include "kernels/cuda/gemm_mma.cuh"
#include "kernels/cuda/gemm_naive.cuh"
#include "kernels/cuda/gemm_quant_rows.cuh"
#include "kernels/cuda/gemm_tiled.cuh"
#include "kernels/cuda/kv_store.cuh"
#include "kernels/cuda/matvec.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/sum.cuh"
#include "kernels/cuda/glu.cuh"
#include "kernels/cuda/matmul_experts.cuh"
#include "kernels/cuda/route_experts.cuh"

namespace minfer {

namespace checks = op_checks;
using op_checks::f32;
using op_checks::i32;
using op_checks::ld;
constexpr DeviceKind kCuda = DeviceKind::cuda;

namespace {

constexpr size_t kBlasWorkspaceBytes = size_t(32) << 20;

int select_device(int device) {
  require_cuda();
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  MINFER_CHECK(device >= 0 && device < count, "CUDA device ", device, ": this machine has ", count);
  CUDA_CHECK(cudaSetDevice(device));
  return device;
}

}  // namespace

class CudaBackend final : public Backend, private Recorder {
 public:
  explicit CudaBackend(const BackendOptions& options)
      : device_(select_device(options.cuda_device)),
        options_(options),
        pool_(make_cuda_device_upstream()),
        pinned_(make_cuda_pinned_upstream()) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    workspace_ = pool_.allocate(kBlasWorkspaceBytes);
    f16_scale_ = pool_.allocate(4 * sizeof(float));
    blas_ = std::make_unique<cuda::BlasGemm>(stream_, workspace_.data(), workspace_.size());
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    device_name_ = detail::concat(prop.name, ", sm_", prop.major, prop.minor);
    sm_count_ = prop.multiProcessorCount;
  }

  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    recordings_.forget("");
    for (Tensor& t : scratch_) t = Tensor();
    blas_.reset();
    workspace_.reset();
    f16_scale_.reset();
    cudaStreamDestroy(stream_);
  }

  DeviceKind device() const override { return kCuda; }
  BackendKind kind() const override { return BackendKind::cuda; }
  // check_weights: Backend's, as every float and quantized type has its kernels here.
  std::string name() const override {
    return detail::concat("cuda (", device_name_, ", gemm ", gemm_name(options_.gemm),
                          options_.graphs ? ", graphs" : "", ")");
  }
  CachingPool& pool() override { return pool_; }
  CachingPool& host_pool() override { return pinned_; }
  void synchronize() override { CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  cudaStream_t stream() const { return stream_; }
  void make_current() const { CUDA_CHECK(cudaSetDevice(device_)); }

  void copy_async(const Tensor& dst, const Tensor& src) override {
    MINFER_CHECK(dst.same_shape(src) && dst.dtype() == src.dtype() && dst.is_contiguous() &&
                     src.is_contiguous(),
                 "copy_async: ", src.str(), " into ", dst.str(), " needs equal contiguous tensors");
    if (dst.nbytes() > 0)
      CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), dst.nbytes(), cudaMemcpyDefault, stream_));
  }

  void run_recorded(const std::string& key, FunctionRef<void()> body) override {
    if (options_.graphs)
      recordings_.run(key, body);
    else
      body();
  }

  void set_recording(bool on) override { options_.graphs = on; }

  void forget_recordings(const std::string& prefix) override { recordings_.forget(prefix); }

  void gather_rows(const Tensor& out, const Tensor& table, const Tensor& ids, float scale) override {
    checks::gather_rows(out, table, ids, kCuda);
    cuda::gather_rows(stream_, f32(out), ld(out), table.data(), table.dtype(), i32(ids), out.size(0), out.size(1),
                      scale);
  }

  void rmsnorm(const Tensor& out, const Tensor& x, const Tensor& weight, float eps) override {
    const int64_t groups = checks::rmsnorm(out, x, weight, kCuda);
    cuda::rmsnorm(stream_, f32(out), ld(out), f32(x), ld(x), f32(weight), x.size(0), weight.size(0), eps, groups);
  }

  void residual_rmsnorm(const Tensor& out, const Tensor& x, const Tensor& delta, const Tensor& weight,
                        float eps) override {
    checks::residual_rmsnorm(out, x, delta, weight, kCuda);
    cuda::residual_rmsnorm(stream_, f32(out), ld(out), f32(x), ld(x), f32(delta), ld(delta), f32(weight), x.size(0),
                           x.size(1), eps);
  }

  void matmul(const Tensor& out, const Tensor& x, const Tensor& w) override {
    checks::matmul(out, x, w, kCuda);
    const int64_t M = x.size(0), N = w.size(0), K = w.size(1);
    switch (cuda_product(options_.gemm, M, w.dtype())) {  // engine/cuda_choices.h
      case CudaProduct::matvec:
        cuda::matvec(stream_, f32(out), ld(out), f32(x), ld(x), w.data(), w.dtype(), M, N, K);
        return;
      case CudaProduct::quant_rows: {
        const int64_t splits = quant_rows_splits(N, K, sm_count_);
        const int64_t floats = cuda::gemm_quant_rows_floats(M, N, splits);
        cuda::gemm_quant_rows(stream_, f32(out), ld(out), f32(x), ld(x), w.data(), w.dtype(), M, N, K, splits,
                              floats > 0 ? scratch(Scratch::quant_rows_partials, floats) : nullptr);
        return;
      }
      case CudaProduct::sgemm:
        blas_->sgemm(f32(out), ld(out), f32(x), ld(x), f32(w), M, N, K);
        return;
      case CudaProduct::dequantize_lt_gemm:
        matmul_quantized_gemm(out, x, w);
        return;
      case CudaProduct::lt_gemm: {
        const Tensor& x16 = half_activations(x, w.dtype());
        blas_->lt_gemm(f32(out), ld(out), x16.data(), w.data(), w.dtype(), M, N, K, half_alpha(w.dtype()));
        return;
      }
      case CudaProduct::naive:
        cuda::gemm_naive(stream_, f32(out), ld(out), f32(x), ld(x), w.data(), w.dtype(), M, N, K);
        return;
      case CudaProduct::tiled:
        cuda::gemm_tiled(stream_, f32(out), ld(out), f32(x), ld(x), w.data(), w.dtype(), M, N, K);
        return;
      case CudaProduct::mma: {
        const Tensor& x16 = half_activations(x, DType::f16);
        cuda::gemm_mma(stream_, f32(out), ld(out), static_cast<const __half*>(x16.data()),
                       static_cast<const __half*>(w.data()), half_alpha(DType::f16), M, N, K);
        return;
      }
    }
  }

  void rope(const Tensor& x, const Tensor& pos, const Tensor& table, int64_t head_dim) override {
    checks::rope(x, pos, table, head_dim, kCuda);
    cuda::rope(stream_, f32(x), ld(x), i32(pos), f32(table), x.size(0), x.size(1) / head_dim, head_dim);
  }

  void kv_store(const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table, const Tensor& k,
                const Tensor& v, const Tensor& seq, const Tensor& pos) override {
    auto cache = checks::kv_store(k_cache, v_cache, block_table, k, v, seq, pos, kCuda);
    cuda::kv_store(stream_, k_cache.data(), v_cache.data(), k_cache.dtype(), f32(k), ld(k), f32(v), ld(v), i32(seq),
                   i32(pos), k.size(0), cache.n_kv_heads, cache.head_dim, cache.table());
  }

  void rope_kv_store(const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table, const Tensor& q,
                     const Tensor& k, const Tensor& v, const Tensor& seq, const Tensor& pos, const Tensor& table,
                     int64_t head_dim) override {
    auto cache = checks::rope_kv_store(k_cache, v_cache, block_table, q, k, v, seq, pos, table, head_dim, kCuda);
    cuda::rope_kv_store(stream_, k_cache.data(), v_cache.data(), k_cache.dtype(), f32(q), ld(q), f32(k), ld(k),
                        f32(v), ld(v), i32(seq), i32(pos), f32(table), q.size(0), q.size(1) / head_dim,
                        cache.n_kv_heads, head_dim, cache.table());
  }

  void attention(const Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                 const Tensor& block_table, const Tensor& seq, const Tensor& pos, const AttentionSpec& spec,
                 AttentionAlgorithm algorithm) override {
    auto s = checks::attention(out, q, k_cache, v_cache, block_table, seq, pos, spec, kCuda);
    cuda::AttentionArgs a{f32(out),       ld(out),         f32(q),          ld(q),    k_cache.data(),
                          v_cache.data(), k_cache.dtype(), s.cache.table(), i32(seq), i32(pos),
                          s.M,            s.n_heads,       s.n_kv_heads,    s.head_dim, spec.score_scale(),
                          spec.window};
    switch (cuda_attention(algorithm, s.M, k_cache.dtype(), s.head_dim)) {  // engine/cuda_choices.h
      case CudaAttention::three_pass:
        cuda::attention_three_pass(stream_, a, scratch(Scratch::attention_scores, cuda::attention_scores_floats(
                                                           s.M, s.n_heads, s.cache.n_ctx())));
        return;
      case CudaAttention::prefill_tiles:
        // One prompt's tiles on Tensor Cores, every other row (a mixed step's decode rows) by
        // flash-decoding; each launch skips the other's rows.
        cuda::attention_prefill_tiles(stream_, a);
        flash_decode(a, s.cache.n_ctx(), true);
        return;
      case CudaAttention::flash_decode:
        flash_decode(a, s.cache.n_ctx(), false);
        return;
    }
  }

  void glu(const Tensor& out, const Tensor& gate, const Tensor& up, GluActivation activation) override {
    const int64_t gate_step = checks::glu(out, gate, up, kCuda);
    cuda::glu(stream_, f32(out), ld(out), f32(gate), ld(gate), gate_step, f32(up), ld(up), out.size(0), out.size(1),
              activation);
  }

  void route_experts(const Tensor& ids, const Tensor& weights, const Tensor& logits, bool normalize) override {
    checks::route_experts(ids, weights, logits, kCuda);
    cuda::route_experts(stream_, ids.data_as<int32_t>(), f32(weights), f32(logits), ld(logits), logits.size(0),
                        logits.size(1), ids.size(1), normalize);
  }

  // The ids stay on the device (graph-safe), so none is checked here: a slot whose id names no
  // expert is left out (its row unwritten, or left out of the weighted sum; matmul_experts.cuh).
  void matmul_experts(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& ids,
                      const Tensor& weights) override {
    const auto s = checks::matmul_experts(out, x, w, ids, weights, kCuda);
    float* grouping = scratch(Scratch::expert_grouping, cuda::matmul_experts_scratch_floats(s.M, s.k, s.E, s.N, s.K));
    cuda::matmul_experts(stream_, f32(out), ld(out), f32(x), ld(x), s.x_per_slot, w.data(), w.dtype(), i32(ids),
                         weights.defined() ? f32(weights) : nullptr, grouping, s.M, s.k, s.E, s.N, s.K);
  }

  void add(const Tensor& out, const Tensor& a, const Tensor& b) override {
    const int64_t ld_b = checks::add(out, a, b, kCuda);
    cuda::add(stream_, f32(out), ld(out), f32(a), ld(a), f32(b), ld_b, out.size(0), out.size(1));
  }

  void argmax(const Tensor& out, const Tensor& x) override {
    checks::argmax(out, x, kCuda);
    cuda::argmax(stream_, out.data_as<int32_t>(), f32(x), ld(x), x.size(0), x.size(1));
  }

  void sum(const Tensor& out, const Tensor& x) override {
    checks::sum(out, x, kCuda);
    cuda::sum(stream_, f32(out), f32(x), x.numel(), scratch(Scratch::sum_partials, cuda::sum_partials_needed()));
  }

  void fill_uniform(const Tensor& t, uint64_t seed, float lo, float hi) override {
    checks::fill(t, kCuda);
    cuda::fill_uniform(stream_, t.data(), t.dtype(), t.numel(), seed, lo, hi);
  }

 private:
  // Recorder: CUDA Graphs captured from the stream.
  void* capture(FunctionRef<void()> body) override {
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      body();
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph != nullptr) cudaGraphDestroy(graph);
      throw;
    }
    CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_CHECK(status);
    return exec;
  }
  void launch(void* recording) override {
    CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(recording), stream_));
  }
  void destroy(void* recording) noexcept override { cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(recording)); }

  // Flash-decoding with its splits sized for this GPU and step (flash_decode_splits): max_keys is
  // the block table's capacity, which bounds every row at this step and at every replay of it.
  void flash_decode(const cuda::AttentionArgs& a, int64_t max_keys, bool skip_prompt_tiles) {
    if (a.M == 0) return;
    const int64_t splits = flash_decode_splits(a.M * a.n_heads, max_keys, sm_count_);
    const int64_t floats = cuda::flash_decode_floats(a.M, a.n_heads, a.head_dim, splits);
    cuda::attention_flash_decode(stream_, a, splits, skip_prompt_tiles,
                                 floats > 0 ? scratch(Scratch::flash_partials, floats) : nullptr);
  }

  // The scratch buffers, each kept and grown on its own.
  enum class Scratch { attention_scores, flash_partials, sum_partials, quant_rows_partials, expert_grouping, count };

  // A device buffer of at least `floats` floats.
  float* scratch(Scratch which, int64_t floats) {
    Tensor& t = scratch_[static_cast<int>(which)];
    recordings_.grow(&t, floats, DType::f32, kCuda, pool_);
    return f32(t);
  }

  // Products with quantized weights (Q8_0, Q4_0 .. Q6_K) of more rows than gemm_quant_rows takes
  // (kQuantRowsMaxRows; cuda_product, engine/cuda_choices.h), a prompt's or a large step's. As in
  // llama.cpp's dequantize-to-f16 path for cuBLAS, a slab of weight rows at a time is dequantized
  // to f16 and multiplied on Tensor Cores by cuBLASLt; every call dequantizes the whole matrix. A
  // slab is a whole number of 256 rows, at least 256: at most kDequantSlab weights (32 MiB of f16)
  // for rows of up to 65,536 weights (K), and 256 rows of K beyond that.
  void matmul_quantized_gemm(const Tensor& out, const Tensor& x, const Tensor& w) {
    const int64_t M = x.size(0), N = w.size(0), K = w.size(1);
    constexpr int64_t kDequantSlab = int64_t(1) << 24;
    // note: whole multiples of 256 rows keep each slab's output columns 1 KiB aligned for cuBLASLt.
    const int64_t slab_rows = std::max<int64_t>(256, kDequantSlab / K / 256 * 256);
    const int64_t rows = std::min(N, slab_rows);
    Tensor& slab = scratch_dequant_;
    recordings_.grow(&slab, rows * K, DType::f16, kCuda, pool_);
    const Tensor& x16 = half_activations(x, DType::f16);
    const int64_t row_bytes = K / dtype_block(w.dtype()) * dtype_block_bytes(w.dtype());
    const auto* weights = static_cast<const char*>(w.data());
    for (int64_t n0 = 0; n0 < N; n0 += rows) {
      const int64_t n = std::min(rows, N - n0);
      cuda::dequantize_rows(stream_, static_cast<__half*>(slab.data()), weights + n0 * row_bytes, w.dtype(), n, K);
      blas_->lt_gemm(f32(out) + n0, ld(out), x16.data(), slab.data(), DType::f16, M, n, K, half_alpha(DType::f16));
    }
  }

  // x (M, K) f32 converted to a dense f16/bf16 copy for the Tensor Core products. f16 is scaled
  // by a power of two where some value would overflow it (cast_rows_f16_scaled), and the product
  // then takes half_alpha(f16) as its alpha; bf16 has f32's range and is not scaled.
  const Tensor& half_activations(const Tensor& x, DType dtype) {
    const int64_t M = x.size(0), K = x.size(1);
    Tensor& t = scratch_half_[dtype == DType::bf16 ? 1 : 0];
    recordings_.grow(&t, M * K, dtype, kCuda, pool_);
    if (dtype == DType::f16)
      cuda::cast_rows_f16_scaled(stream_, static_cast<__half*>(t.data()), f32(x), ld(x), M, K, half_alpha(dtype),
                                 reinterpret_cast<unsigned*>(static_cast<float*>(f16_scale_.data()) + 2));
    else
      cuda::cast_rows(stream_, t.data(), dtype, f32(x), ld(x), M, K);
    return t;
  }
  // {alpha, beta} on the device for a product of the last half_activations of `dtype`: the f16
  // scale's inverse, or nullptr (alpha 1) for bf16.
  float* half_alpha(DType dtype) {
    return dtype == DType::f16 ? static_cast<float*>(f16_scale_.data()) : nullptr;
  }

  int device_;
  BackendOptions options_;
  CachingPool pool_;
  CachingPool pinned_;
  cudaStream_t stream_ = nullptr;
  PoolBlock workspace_;
  PoolBlock f16_scale_;  // {alpha, beta, largest |x| as bits}: cast_rows_f16_scaled's, on the device
  int64_t sm_count_ = 1;
  std::unique_ptr<cuda::BlasGemm> blas_;
  std::string device_name_;
  Tensor scratch_[static_cast<int>(Scratch::count)];
  Tensor scratch_half_[2];
  Tensor scratch_dequant_;  // f16 weights dequantized from a quantized type for prefill (over kQuantRowsMaxRows rows)
  RecordingCache recordings_{*this};
};

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

void use_on_this_thread(Backend& backend) {
  if (auto* cuda = dynamic_cast<CudaBackend*>(&backend)) cuda->make_current();
}

void* cuda_stream_of(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  MINFER_CHECK(cuda != nullptr, "a CUDA stream is asked of the ", backend.name(), " backend");
  return cuda->stream();
}

}  // namespace minfer
