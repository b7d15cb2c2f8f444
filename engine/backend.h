// The backend interface: the ops a Llama decoder needs, on tensors of one device.
//
// A model is written once against this interface (model/llama.cpp) and any backend runs it: the
// reference backend (the plain loops of kernels/ref/, engine/backend_ref.cpp), the CPU backend
// (Eigen and hand-written SIMD, engine/backend_cpu.cpp) and the CUDA backend
// (engine/backend_cuda.cu). Every op has a plain-loop reference in kernels/ref/ that the op
// harness (tests/test_backend_ops.cpp) checks each backend against.
//
// Conventions, shared by all ops:
//   - activations are f32, 2-D, [rows, features]; rows may be spaced apart (a column slice of a
//     wider tensor, e.g. q, k and v as slices of one fused QKV product), the last stride is 1;
//   - weights are [out_features, in_features] as llama2.c stores them, dense f32/f16/bf16 or
//     quantized blocks (core/quants.h); a mixture of experts' are a stack of such matrices,
//     [experts, out_features, in_features], and its routing an i32 [rows, k] table of expert ids;
//   - outputs come first in every op's arguments, then tensors updated in place, then inputs;
//   - the KV cache of one layer is a pool of blocks, (n_blocks, n_kv_heads, block_size, head_dim),
//     head-major within a block, and an i32 block table (n_seqs, width) names each sequence's
//     blocks (kernels/ref/kv_store.h; why: the note atop engine/kv_cache.h);
//   - seq and pos are i32 [rows]: which sequence a row belongs to and its position in it.
// Ops enqueue work on the backend's device; synchronize() waits for it. Shapes are checked on every
// call (engine/op_checks.h) and a mismatch throws Error naming the op and both shapes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/pool.h"
#include "core/tensor.h"
#include "core/threads.h"
#include "kernels/ref/attention.h"
#include "kernels/ref/glu.h"

namespace minfer {

// Which implementation runs the ops: the plain loops of kernels/ref/ (the readable reference,
// engine/backend_ref.h), the CPU kernels, or CUDA. ref and cpu keep their tensors in host memory.
enum class BackendKind { ref, cpu, cuda };
const char* backend_kind_name(BackendKind kind);
// "ref", "cpu", "cuda", or "auto": cuda when a GPU is usable, else cpu. Asking for cuda without
// one throws Error("no CUDA device: <reason>").
BackendKind parse_backend_kind(const std::string& name);

// The hand-written CUDA matrix products of kernels/cuda/gemm_*.cu, or cuBLAS/cuBLASLt.
enum class GemmKind { naive, tiled, mma, cublas };
const char* gemm_name(GemmKind g);
GemmKind parse_gemm(const std::string& name);

struct BackendOptions {
  int threads = 0;                             // CPU threads, 0 = every core
  int spin_us = ThreadPool::kDefaultSpinMicros;  // how long idle CPU workers spin before sleeping
  GemmKind gemm = GemmKind::cublas;            // CUDA matrix products
  bool graphs = true;                          // CUDA: record decode steps as CUDA Graphs
  int cuda_device = 0;                         // CUDA: which GPU (under mpirun the rank's local index modulo the GPUs: cli_common)
  // CPU: every row of a product with f32, f16 or bf16 weights, or a quantized type the CPU does
  // not pack (pack_weights), computed as a lone row is, whatever the rows with it
  // (kernels/cpu/matmul.h), so greedy answers do not depend on how prompts are split into passes
  // or batched; prefill is slower. Packed weights give that without it.
  bool batch_invariant = false;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind device() const = 0;  // where its tensors live
  virtual BackendKind kind() const = 0;
  virtual std::string name() const = 0;  // e.g. "cpu (2 threads, AVX-512)"
  virtual int cpu_threads() const { return 0; }  // threads of a CPU backend, 0 for a GPU
  virtual CachingPool& pool() = 0;       // memory of this device
  // Host memory for transfers to and from this device (pinned on CUDA, so copies are DMA).
  virtual CachingPool& host_pool() = 0;
  virtual void synchronize() {}

  // Throws Error naming `model` and the type when this backend cannot multiply or look up
  // weights of type t (i32 on every backend).
  virtual void check_weights(DType t, const std::string& model) const;
  // Rearranges the rows of a weight matrix w (N, K), or of each matrix of a stack of experts' (E,
  // N, K), in place, into the layout this backend multiplies fastest, and returns the view to
  // multiply (matmul, matmul_experts) and look up (gather_rows) from then on; w's own view must not
  // be used again. A backend without a layout of its own returns
  // w. The CPU backend packs the quantized types cpu::packs() names (RowLayout::packed16, whose
  // products give a row the same result whatever rows share it); w's bytes stay as many.
  virtual Tensor pack_weights(const Tensor& w) { return w; }

  // Uninitialised memory on this backend's device.
  Tensor empty(const std::vector<int64_t>& shape, DType dtype) {
    return Tensor::empty(shape, dtype, device(), pool());
  }
  // Uninitialised host memory from host_pool().
  Tensor empty_host(const std::vector<int64_t>& shape, DType dtype) {
    return Tensor::empty(shape, dtype, DeviceKind::cpu, host_pool());
  }

  // A copy queued behind the ops already enqueued (dense rows on both sides); synchronize()
  // before reading a host destination.
  virtual void copy_async(const Tensor& dst, const Tensor& src) { dst.copy_from(src); }
  // Runs `body`, which must enqueue exactly the same work on the same memory every time it runs
  // under `key`. A backend that can record work (CUDA Graphs) runs it normally once, records it
  // the second time and from then on replays the recording: one launch instead of hundreds.
  virtual void run_recorded(const std::string& key, FunctionRef<void()> body) {
    (void)key;
    body();
  }
  // Drops the recordings whose key starts with `prefix` (their memory is about to be freed).
  virtual void forget_recordings(const std::string& prefix) { (void)prefix; }
  // Turns recording (CUDA Graphs) on or off where the backend can record.
  virtual void set_recording(bool on) { (void)on; }

  // out[m, :] = scale * table[ids[m], :]   out (M, D) f32; table (V, D); ids (M) i32; scale: 1, or
  //                                Gemma's sqrt(dim) on its embeddings
  virtual void gather_rows(const Tensor& out, const Tensor& table, const Tensor& ids, float scale) = 0;
  // out = rmsnorm(x) * weight      out, x (M, D); weight (D) f32, or (G) with D = k G: each row's
  //                                k runs of G normalised apart (Qwen3's heads); out may alias x
  virtual void rmsnorm(const Tensor& out, const Tensor& x, const Tensor& weight, float eps) = 0;
  // fused: x += delta; out = rmsnorm(x) * weight      out, x, delta (M, D); x updated in place
  virtual void residual_rmsnorm(const Tensor& out, const Tensor& x, const Tensor& delta,
                                const Tensor& weight, float eps) = 0;
  // out = x * w^T                  out (M, N); x (M, K); w (N, K)
  virtual void matmul(const Tensor& out, const Tensor& x, const Tensor& w) = 0;
  // rotary embedding in place      x (M, heads * head_dim); pos (M); table (positions, head_dim)
  virtual void rope(const Tensor& x, const Tensor& pos, const Tensor& table, int64_t head_dim) = 0;
  // cache[seq[m], :, pos[m], :] = row m of k and v, head by head, through the block table
  virtual void kv_store(const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table,
                        const Tensor& k, const Tensor& v, const Tensor& seq, const Tensor& pos) = 0;
  // fused: rope(q), rope(k), kv_store(k, v)      q and k rotated in place
  virtual void rope_kv_store(const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table,
                             const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& seq,
                             const Tensor& pos, const Tensor& table, int64_t head_dim) = 0;
  // causal attention of each row over its sequence's cache up to its position (within the spec's
  // window, scores scaled as it says), by either algorithm of kernels/ref/attention.h
  virtual void attention(const Tensor& out, const Tensor& q, const Tensor& k_cache,
                         const Tensor& v_cache, const Tensor& block_table, const Tensor& seq,
                         const Tensor& pos, const AttentionSpec& spec, AttentionAlgorithm algorithm) = 0;
  // out = act(gate) * up           (M, F) each; act: silu (SwiGLU) or tanh-GELU (GeGLU); or gate
  //                                (M, 1), one value a row that scales its row of up (sigmoid:
  //                                Qwen2-MoE's gated shared expert)
  virtual void glu(const Tensor& out, const Tensor& gate, const Tensor& up, GluActivation activation) = 0;
  // A mixture of experts' router, row by row: p = softmax(logits[m, :]); ids[m, :] = the k experts
  // of largest p, best first (ties: the lower expert first); weights[m, j] = p[ids[m, j]], divided
  // by the k's sum where `normalize` (Mixtral's softmax over the top k is the same numbers)
  //                                ids (M, k) i32; weights (M, k) f32; logits (M, E) f32, k <= E
  virtual void route_experts(const Tensor& ids, const Tensor& weights, const Tensor& logits, bool normalize) = 0;
  // The expert product (matmul broadened, as ggml's mul_mat_id): slot j of row m multiplies by the
  // matrix of expert ids[m, j],   y[m, j, :] = x[m or m k + j, :] * w[ids[m, j]]^T
  //                                x (M, K): one row for all its slots, or (M k, K): one per slot;
  //                                w (E, N, K); ids (M, k) i32 in [0, E)
  // out (M k, N) = y (row m k + j); or, with `weights` (M, k) f32 defined, out (M, N) =
  // sum over j, in j order, of weights[m, j] * y[m, j, :]. The CPU and CUDA group the rows by
  // expert, so each chosen expert's matrix is read from memory once for all the rows that chose
  // it (on CUDA in chunks of up to 8 rows, a chunk after the first likely from cache).
  virtual void matmul_experts(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& ids,
                              const Tensor& weights) = 0;
  // out = a + b                    out, a (M, D); b (M, D), or (D): one row added to every row (a
  //                                bias, Qwen2's on q, k, v); out may alias a, or b when b is (M, D)
  virtual void add(const Tensor& out, const Tensor& a, const Tensor& b) = 0;
  // out[m] = argmax x[m, :]        out (M) i32; x (M, N)
  virtual void argmax(const Tensor& out, const Tensor& x) = 0;
  // out[0] = sum of x                out (1) f32; x (n) f32, contiguous, starting on 16 bytes (CUDA
  // reads it as float4). A pure streaming read, used to measure the memory bandwidth the roofline
  // compares decode against.
  virtual void sum(const Tensor& out, const Tensor& x) = 0;
  // t[i] = uniform value of (seed, i) in [lo, hi), identical on every backend (kernels/ref/fill.h);
  // t contiguous, any type but i32: f32/f16/bf16 as the values, legacy quantized types as those
  // values quantized, K-quants as synthetic blocks. Builds synthetic weights where they will be used.
  virtual void fill_uniform(const Tensor& t, uint64_t seed, float lo, float hi) = 0;
};

// A backend of `kind`; throws Error("no CUDA device: ...") when CUDA is asked for and absent.
std::unique_ptr<Backend> make_backend(BackendKind kind, const BackendOptions& options = {});
// A CUDA backend's stream (a cudaStream_t), on which its work runs in order: NCCL's collectives
// join it (engine/communicator.h). Error for another backend, or in a build without CUDA.
void* cuda_stream_of(Backend& backend);
// Makes a CUDA backend's GPU the calling thread's current device (the CUDA runtime keeps one per
// thread): a thread other than the one that made the backend calls it before using it, as
// serve's engine thread does. A no-op for other backends.
void use_on_this_thread(Backend& backend);

// Throws Error("WHAT needs BYTES bytes, F of T are free on DEVICE") when the backend's device
// reports its memory and `bytes` exceed what is free; the one check done before every large
// allocation (weights, KV cache, a decoder's buffers).
void check_memory_fits(Backend& backend, uint64_t bytes, const std::string& what);

}  // namespace minfer
