// Google Benchmark micro-benchmarks of the CPU ops at the shapes decode and prefill use, each
// reporting the rate that limits it: FLOP/s for matrix products, bytes/s for the memory-bound
// ops (weights or KV cache read, activations read and written).
//   ./build/bench/minfer_microbench --benchmark_filter=Matmul
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "engine/backend_cpu.h"
#include "kernels/cpu/matmul_q8.h"

namespace minfer {
namespace {

// The CPU backend with every core, or with `threads` threads.
CpuBackend& backend(int threads = 0) {
  static std::map<int, std::unique_ptr<CpuBackend>> backends;
  auto& b = backends[threads];
  if (!b) {
    BackendOptions options;
    options.threads = threads;
    b = std::make_unique<CpuBackend>(options);
  }
  return *b;
}

Tensor random(const std::vector<int64_t>& shape, DType dtype = DType::f32, uint64_t seed = 1) {
  Tensor f = backend().empty(shape, DType::f32);
  backend().fill_uniform(f, seed, -1.0f, 1.0f);
  if (dtype == DType::f32) return f;
  Tensor t = backend().empty(shape, dtype);
  t.convert_from(f);
  return t;
}

// out (M, N) = x (M, K) * w (N, K)^T
void BM_Matmul(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  const DType dtype = static_cast<DType>(state.range(3));
  const int threads = state.range(4) > 0 ? static_cast<int>(state.range(4)) : 0;
  Tensor x = random({M, K}), w = random({N, K}, dtype, 2), out = backend().empty({M, N}, DType::f32);
  for (auto _ : state) backend(threads).matmul(out, x, w);
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * double(M * N * K), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight B/s"] = benchmark::Counter(double(N * K * dtype_size(dtype)),
                                                    benchmark::Counter::kIsIterationInvariantRate,
                                                    benchmark::Counter::kIs1024);
  state.SetLabel(std::string(dtype_name(dtype)) + ", " + std::to_string(backend(threads).cpu_threads()) + " threads");
}
// decode (M = 1 and a batch of 16) and prefill (M = 256) shapes of stories15M / stories110M
BENCHMARK(BM_Matmul)
    ->ArgNames({"M", "N", "K", "dtype", "threads"})
    ->Args({1, 768, 768, int(DType::f32), 0})
    ->Args({1, 4096, 768, int(DType::f32), 0})
    ->Args({1, 4096, 768, int(DType::bf16), 0})
    ->Args({1, 4096, 768, int(DType::f16), 0})
    ->Args({1, 32000, 288, int(DType::f32), 0})
    ->Args({4, 4096, 768, int(DType::f32), 0})
    ->Args({16, 864, 288, int(DType::f32), 0})
    ->Args({16, 1536, 288, int(DType::f32), 0})
    ->Args({16, 288, 768, int(DType::f32), 0})
    ->Args({16, 32000, 288, int(DType::f32), 0})
    ->Args({256, 864, 288, int(DType::f32), 0})
    ->Args({256, 1536, 288, int(DType::f32), 0})
    ->Args({256, 2304, 768, int(DType::f32), 0})
    ->Args({256, 2304, 768, int(DType::bf16), 0})
    ->Args({16, 1536, 288, int(DType::f32), 1})
    ->Args({16, 32000, 288, int(DType::f32), 1})
    ->Args({256, 1536, 288, int(DType::f32), 1})
    ->Unit(benchmark::kMicrosecond);

// The same products with the weights coming from DRAM, as in a decode step: enough copies of the
// weight matrix (128 MiB in all) are cycled through that none is still in the last-level cache.
void BM_MatmulFromDram(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  const int64_t copies = std::max<int64_t>(2, (int64_t(128) << 20) / (N * K * 4));
  Tensor x = random({M, K}), out = backend().empty({M, N}, DType::f32);
  std::vector<Tensor> w;
  for (int64_t c = 0; c < copies; ++c) w.push_back(random({N, K}, DType::f32, 2 + c));
  int64_t c = 0;
  for (auto _ : state) {
    backend().matmul(out, x, w[c]);
    c = (c + 1) % copies;
  }
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * double(M * N * K), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight B/s"] = benchmark::Counter(double(N * K * 4), benchmark::Counter::kIsIterationInvariantRate,
                                                    benchmark::Counter::kIs1024);
}
BENCHMARK(BM_MatmulFromDram)
    ->ArgNames({"M", "N", "K"})
    ->ArgsProduct({{1, 16}, {864, 1536}, {288}})
    ->Args({1, 288, 768})
    ->Args({16, 288, 768})
    ->Args({1, 32000, 288})
    ->Args({16, 32000, 288})
    ->Args({1, 4096, 768})
    ->Args({1, 32000, 768})
    ->Unit(benchmark::kMicrosecond);

// Q8_0 weights from DRAM (copies cycled past the caches): the int8 kernel for decode rows, Eigen
// on dequantized tiles above 32 rows. Weight bytes per second against the streaming probe.
void BM_MatmulQ8FromDram(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  const int64_t bytes = N * K / 32 * 34, copies = std::max<int64_t>(2, (int64_t(128) << 20) / bytes);
  Tensor x = random({M, K}), out = backend().empty({M, N}, DType::f32);
  std::vector<Tensor> w;
  for (int64_t c = 0; c < copies; ++c) w.push_back(random({N, K}, DType::q8_0, 2 + c));
  int64_t c = 0;
  for (auto _ : state) {
    cpu::matmul_q8_0(backend().threads(), out.data_as<float>(), N, x.data_as<float>(), K,
                     static_cast<const BlockQ8*>(w[c].data()), M, N, K);
    c = (c + 1) % copies;
  }
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * double(M * N * K), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight B/s"] = benchmark::Counter(double(bytes), benchmark::Counter::kIsIterationInvariantRate,
                                                    benchmark::Counter::kIs1024);
}
BENCHMARK(BM_MatmulQ8FromDram)
    ->ArgNames({"M", "N", "K"})
    ->ArgsProduct({{1, 4, 16, 64}, {4096, 2304}, {768}})
    ->Args({1, 768, 2048})
    ->Args({1, 32000, 768})
    ->Unit(benchmark::kMicrosecond);

// Causal attention of M rows of one sequence at context length T over an f32 cache.
void BM_Attention(benchmark::State& state) {
  const int64_t T = state.range(0), M = state.range(1), heads = 12, head_dim = 64;
  const auto algorithm = state.range(2) != 0 ? AttentionAlgorithm::online_softmax : AttentionAlgorithm::three_pass;
  Tensor q = random({M, heads * head_dim}), out = backend().empty({M, heads * head_dim}, DType::f32);
  Tensor k = random({1, heads, T, head_dim}, DType::f32, 3), v = random({1, heads, T, head_dim}, DType::f32, 4);
  Tensor seq = backend().empty({M}, DType::i32), pos = backend().empty({M}, DType::i32);
  for (int64_t m = 0; m < M; ++m) {
    seq.data_as<int32_t>()[m] = 0;
    pos.data_as<int32_t>()[m] = static_cast<int32_t>(T - M + m);
  }
  for (auto _ : state) backend().attention(out, q, k, v, seq, pos, head_dim, algorithm);
  state.counters["KV B/s"] = benchmark::Counter(double(2 * M * T * heads * head_dim * 4),
                                                benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1024);
  state.SetLabel(attention_algorithm_name(algorithm));
}
BENCHMARK(BM_Attention)
    ->ArgNames({"ctx", "rows", "online"})
    ->ArgsProduct({{128, 512, 1024}, {1}, {0, 1}})
    ->Args({256, 16, 1})
    ->Unit(benchmark::kMicrosecond);

// One decode step's attention for a batch of B sequences (one row each, all at position T - 1)
// in stories15M's shape: 6 heads of 48. `layers` separate caches are cycled through, as the
// layers of a model do, so that with several layers the cache comes from DRAM, not L3. `f16`: the
// cache in f16 (--kv-dtype f16).
void BM_AttentionBatch(benchmark::State& state) {
  const int64_t T = state.range(0), B = state.range(1), layers = state.range(2), n_ctx = 256;
  const auto algorithm = state.range(3) != 0 ? AttentionAlgorithm::online_softmax : AttentionAlgorithm::three_pass;
  const DType cache_dtype = state.range(4) != 0 ? DType::f16 : DType::f32;
  const int64_t heads = 6, head_dim = 48;
  Tensor q = random({B, heads * head_dim}), out = backend().empty({B, heads * head_dim}, DType::f32);
  std::vector<Tensor> k, v;
  for (int64_t l = 0; l < layers; ++l) {
    k.push_back(random({B, heads, n_ctx, head_dim}, cache_dtype, 3 + 2 * l));
    v.push_back(random({B, heads, n_ctx, head_dim}, cache_dtype, 4 + 2 * l));
  }
  Tensor seq = backend().empty({B}, DType::i32), pos = backend().empty({B}, DType::i32);
  for (int64_t m = 0; m < B; ++m) {
    seq.data_as<int32_t>()[m] = static_cast<int32_t>(m);
    pos.data_as<int32_t>()[m] = static_cast<int32_t>(T - 1);
  }
  int64_t layer = 0;
  for (auto _ : state) {
    backend().attention(out, q, k[layer], v[layer], seq, pos, head_dim, algorithm);
    layer = (layer + 1) % layers;
  }
  state.counters["KV B/s"] = benchmark::Counter(double(2 * B * T * heads * head_dim * dtype_size(cache_dtype)),
                                                benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1024);
  state.SetLabel(attention_algorithm_name(algorithm));
}
BENCHMARK(BM_AttentionBatch)
    ->ArgNames({"ctx", "n_seqs", "layers", "online", "f16"})
    ->ArgsProduct({{64, 128}, {16}, {1, 24}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

void BM_RmsNorm(benchmark::State& state) {
  const int64_t M = state.range(0), D = state.range(1);
  Tensor x = random({M, D}), w = random({D}), out = backend().empty({M, D}, DType::f32);
  for (auto _ : state) backend().rmsnorm(out, x, w, 1e-5f);
  state.SetBytesProcessed(state.iterations() * 2 * M * D * 4);
}
BENCHMARK(BM_RmsNorm)->ArgNames({"M", "D"})->Args({1, 768})->Args({256, 768})->Args({4096, 768});

void BM_SwiGLU(benchmark::State& state) {
  const int64_t M = state.range(0), F = state.range(1);
  Tensor g = random({M, F}), u = random({M, F}, DType::f32, 2), out = backend().empty({M, F}, DType::f32);
  for (auto _ : state) backend().swiglu(out, g, u);
  state.SetBytesProcessed(state.iterations() * 3 * M * F * 4);
}
BENCHMARK(BM_SwiGLU)->ArgNames({"M", "F"})->Args({1, 2048})->Args({256, 2048});

// The streaming read the roofline's bandwidth comes from.
void BM_StreamingRead(benchmark::State& state) {
  const int64_t n = state.range(0) / 4;
  Tensor x = random({n}), out = backend().empty({1}, DType::f32);
  for (auto _ : state) backend().sum(out, x);
  state.SetBytesProcessed(state.iterations() * n * 4);
}
BENCHMARK(BM_StreamingRead)->Arg(int64_t(1) << 30)->Arg(int64_t(16) << 20)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace minfer

BENCHMARK_MAIN();
