// Google Benchmark micro-benchmarks of the CPU ops at the shapes decode and prefill use, each
// reporting the rate that limits it: FLOP/s for matrix products, bytes/s for the memory-bound
// ops (weights or KV cache read, activations read and written).
//   ./build/bench/minfer_microbench --benchmark_filter=Matmul
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "engine/backend_cpu.h"
#include "engine/roofline.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant/packed.h"

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

// Uniform in [-1, 1] rounded to dtype; K-quants, which minfer does not quantize, as random blocks.
Tensor random(const std::vector<int64_t>& shape, DType dtype = DType::f32, uint64_t seed = 1) {
  if (is_k_quant(dtype)) {
    Tensor t = backend().empty(shape, dtype);
    backend().fill_uniform(t, seed, -1.0f, 1.0f);
    return t;
  }
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
  state.counters["weight B/s"] = benchmark::Counter(double(dtype_bytes(dtype, uint64_t(N * K))),
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
    ->Args({256, 2304, 768, int(DType::f16), 0})
    ->Args({256, 2304, 768, int(DType::q8_0), 0})
    ->Args({256, 2304, 768, int(DType::q4_0), 0})
    ->Args({256, 2304, 768, int(DType::q4_k), 0})
    ->Args({256, 2304, 768, int(DType::q6_k), 0})
    ->Args({256, 768, 2048, int(DType::q4_k), 0})
    ->Args({256, 2304, 768, int(DType::f32), 1})
    ->Args({256, 2304, 768, int(DType::bf16), 1})
    ->Args({256, 2304, 768, int(DType::f16), 1})
    ->Args({256, 2304, 768, int(DType::q8_0), 1})
    ->Args({256, 2304, 768, int(DType::q4_k), 1})
    ->Args({256, 2304, 768, int(DType::q6_k), 1})
    ->Args({16, 1536, 288, int(DType::f32), 1})
    ->Args({16, 32000, 288, int(DType::f32), 1})
    ->Args({256, 1536, 288, int(DType::f32), 1})
    // decode's dot products at one thread, the weights in L2: what the arithmetic alone allows
    ->ArgsProduct({{1}, {768}, {768}, {int(DType::q8_0), int(DType::q4_0), int(DType::q4_k), int(DType::q6_k)}, {1}})
    // batched decode with quantized weights, about where the integer GEMM takes over from the dot
    // products (quant_gemm_min_rows: 5 rows for Q4_1, 10 for Q8_0, 20 for Q6_K with AVX-512 VNNI)
    ->ArgsProduct({{4, 5, 8, 10, 16, 20, 32}, {3072}, {768}, {int(DType::q8_0), int(DType::q4_1), int(DType::q6_k)}, {0}})
    ->Unit(benchmark::kMicrosecond);

// The same products with the weights coming from main memory, as in a decode step: enough copies
// of the weight matrix are cycled through (4x the last cache in all, at least 256 MiB) that none
// is still cached. Weight bytes per second against the roofline's DRAM line; the 4th argument is
// the weights' dtype, the 5th the threads (0: every core).
void BM_MatmulFromDram(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  const auto dtype = static_cast<DType>(state.range(3));
  const int threads = state.range(4) > 0 ? static_cast<int>(state.range(4)) : 0;
  static const uint64_t working_set =
      std::max<uint64_t>(uint64_t(256) << 20, kMainOverLastCache * last_cache_bytes(device_memory_levels(backend())));
  const uint64_t bytes = dtype_bytes(dtype, uint64_t(N * K));
  const int64_t copies = std::max<int64_t>(2, int64_t((working_set + bytes - 1) / bytes));
  Tensor x = random({M, K}), out = backend().empty({M, N}, DType::f32);
  std::vector<Tensor> w;
  for (int64_t c = 0; c < copies; ++c) w.push_back(random({N, K}, dtype, 2 + c));
  int64_t c = 0;
  for (auto _ : state) {
    backend(threads).matmul(out, x, w[c]);
    c = (c + 1) % copies;
  }
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * double(M * N * K), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight B/s"] =
      benchmark::Counter(double(bytes), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1024);
}
constexpr int kF32 = int(DType::f32), kBf16 = int(DType::bf16), kF16 = int(DType::f16), kQ8 = int(DType::q8_0);
constexpr int kQ4_0 = int(DType::q4_0), kQ4_K = int(DType::q4_k), kQ6_K = int(DType::q6_k);
BENCHMARK(BM_MatmulFromDram)
    ->ArgNames({"M", "N", "K", "dtype", "threads"})
    ->ArgsProduct({{1, 16}, {864, 1536}, {288}, {kF32}, {0}})
    ->Args({1, 288, 768, kF32, 0})
    ->Args({16, 288, 768, kF32, 0})
    ->Args({1, 32000, 288, kF32, 0})
    ->Args({16, 32000, 288, kF32, 0})
    ->ArgsProduct({{1}, {2048, 768}, {768, 2048}, {kF32, kBf16, kF16, kQ8}, {0}})
    ->ArgsProduct({{4, 16, 64}, {2304}, {768}, {kQ8}, {0}})
    ->Args({1, 32000, 768, kF32, 0})
    // GGUF's types at decode, stories110M's shapes (the output matrix in Q6_K), one thread and all
    ->ArgsProduct({{1}, {2048}, {768}, {kQ8, kQ4_0, kQ4_K, kQ6_K}, {1, 0}})
    ->ArgsProduct({{1}, {32000}, {768}, {kQ6_K}, {1, 0}})
    ->Unit(benchmark::kMicrosecond);

// Quantized weights in the file's layout (cpu::matmul: decode's dot products, the integer GEMM from
// quant_gemm_min_rows) against the same weights packed at load (cpu::matmul_packed, one kernel for
// every M), both on a pool of `threads` threads (0: every core) and from main memory as above (f32
// runs the file's path, for its bytes per second). The 5th argument: 1 packed, 0 the file's layout.
// Rates per wall-clock second (UseRealTime): the pool's threads work while the caller waits.
void BM_QuantLayoutFromDram(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  const auto dtype = static_cast<DType>(state.range(3));
  const bool packed = state.range(4) != 0;
  if (packed && !cpu::packs(dtype)) {
    state.SkipWithError("this build does not pack the type");
    return;
  }
  const int threads = state.range(5) > 0 ? static_cast<int>(state.range(5)) : ThreadPool::hardware_threads();
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  auto& pool = pools[threads];
  if (!pool) pool = std::make_unique<ThreadPool>(threads);
  static const uint64_t working_set =
      std::max<uint64_t>(uint64_t(256) << 20, kMainOverLastCache * last_cache_bytes(device_memory_levels(backend())));
  const uint64_t bytes = dtype_bytes(dtype, uint64_t(N * K));
  const int64_t copies = std::max<int64_t>(2, int64_t((working_set + bytes - 1) / bytes));
  Tensor x = random({M, K}), out = backend().empty({M, N}, DType::f32);
  const Tensor file = random({N, K}, dtype, 2);  // one matrix, copied (the values do not matter here)
  std::vector<std::vector<uint8_t>> w;
  for (int64_t c = 0; c < copies; ++c) {
    w.emplace_back(bytes);
    if (packed)
      cpu::pack_rows(dtype, w.back().data(), file.data(), N, K);
    else
      std::memcpy(w.back().data(), file.data(), bytes);
  }
  int64_t c = 0;
  for (auto _ : state) {
    if (packed)
      cpu::matmul_packed(*pool, out.data_as<float>(), N, x.data_as<float>(), K, w[size_t(c)].data(), dtype, M, N, K);
    else
      cpu::matmul(*pool, out.data_as<float>(), N, x.data_as<float>(), K, w[size_t(c)].data(), dtype, M, N, K);
    c = (c + 1) % copies;
  }
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * double(M * N * K), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight B/s"] =
      benchmark::Counter(double(bytes), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1024);
  state.SetLabel(std::string(dtype_name(dtype)) + (packed ? ", packed, " : ", file layout, ") + std::to_string(threads) +
                 " threads");
}
constexpr int kQ4_1 = int(DType::q4_1), kQ5_0 = int(DType::q5_0);
BENCHMARK(BM_QuantLayoutFromDram)
    ->ArgNames({"M", "N", "K", "dtype", "packed", "threads"})
    // Qwen2.5-0.5B's MLP shapes: decode, and a prefill-shaped product of 256 rows, every core
    ->ArgsProduct({{1}, {4864}, {896}, {kF32}, {0}, {0}})
    ->ArgsProduct({{1}, {896}, {4864}, {kF32}, {0}, {0}})
    ->ArgsProduct({{1, 256}, {4864}, {896}, {kQ8, kQ4_0, kQ4_1, kQ5_0}, {0, 1}, {0}})
    ->ArgsProduct({{1, 256}, {896}, {4864}, {kQ8, kQ4_0, kQ4_1, kQ5_0}, {0, 1}, {0}})
    // the K-quants need K in whole super-blocks of 256: the down projection's shape
    ->ArgsProduct({{1, 256}, {896}, {4864}, {kQ4_K, kQ6_K}, {0, 1}, {0}})
    // decode at one thread
    ->ArgsProduct({{1}, {4864}, {896}, {kF32}, {0}, {1}})
    ->ArgsProduct({{1}, {4864}, {896}, {kQ8, kQ4_0, kQ4_1, kQ5_0}, {0, 1}, {1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Decode attention of B sequences at T positions through block tables of `block` positions per
// block (T: one block per sequence, the layout before the cache was paged), SmolLM2-135M's heads
// (9 query heads sharing 3 KV heads of 64), an f32 cache. As decode reads each layer's cache once
// per step between the weights' reads, enough caches (one per layer, 4x the last cache in all) are
// cycled through that none is still cached. KV bytes per second against the roofline's DRAM line.
void BM_AttentionDecodeFromDram(benchmark::State& state) {
  const int64_t B = state.range(0), T = state.range(1), block = state.range(2);
  const int64_t heads = 9, kv_heads = 3, hd = 64, width = (T + block - 1) / block, n_blocks = B * width;
  static const uint64_t working_set =
      std::max<uint64_t>(uint64_t(256) << 20, kMainOverLastCache * last_cache_bytes(device_memory_levels(backend())));
  const uint64_t layer_bytes = uint64_t(2 * n_blocks * kv_heads * block * hd * 4);
  const int64_t layers = std::max<int64_t>(2, int64_t((working_set + layer_bytes - 1) / layer_bytes));
  std::vector<Tensor> k, v;
  for (int64_t l = 0; l < layers; ++l) {
    k.push_back(random({n_blocks, kv_heads, block, hd}, DType::f32, 3 + 2 * l));
    v.push_back(random({n_blocks, kv_heads, block, hd}, DType::f32, 4 + 2 * l));
  }
  Tensor q = random({B, heads * hd}), out = backend().empty({B, heads * hd}, DType::f32);
  Tensor table = backend().empty({B, width}, DType::i32), seq = backend().empty({B}, DType::i32);
  Tensor pos = backend().empty({B}, DType::i32);
  for (int64_t i = 0; i < n_blocks; ++i) table.data_as<int32_t>()[i] = static_cast<int32_t>(i);
  for (int64_t s = 0; s < B; ++s) {
    seq.data_as<int32_t>()[s] = static_cast<int32_t>(s);
    pos.data_as<int32_t>()[s] = static_cast<int32_t>(T - 1);
  }
  int64_t l = 0;
  for (auto _ : state) {
    backend().attention(out, q, k[l], v[l], table, seq, pos, {hd}, AttentionAlgorithm::online_softmax);
    l = (l + 1) % layers;
  }
  state.counters["KV B/s"] = benchmark::Counter(double(2 * B * kv_heads * T * hd * 4), benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1024);
}
BENCHMARK(BM_AttentionDecodeFromDram)
    ->ArgNames({"B", "T", "block"})
    ->ArgsProduct({{1}, {2048}, {16, 64, 2048}})
    ->ArgsProduct({{16}, {512}, {16, 64, 512}})
    ->Unit(benchmark::kMicrosecond);

// Packing at load (cpu::pack_rows), one thread: the file's bytes per second, Qwen2.5-0.5B's down
// projection (896 x 4864), per type this build packs (its load adds the model's bytes over this).
void BM_PackRows(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  if (!cpu::packs(dtype)) {
    state.SkipWithError("this build does not pack the type");
    return;
  }
  const int64_t N = 896, K = 4864;
  const Tensor file = random({N, K}, dtype, 2);
  std::vector<uint8_t> packed(dtype_bytes(dtype, uint64_t(N * K)));
  for (auto _ : state) {
    cpu::pack_rows(dtype, packed.data(), file.data(), N, K);
    benchmark::DoNotOptimize(packed.data());
  }
  state.counters["file B/s"] = benchmark::Counter(double(packed.size()), benchmark::Counter::kIsIterationInvariantRate,
                                                  benchmark::Counter::kIs1024);
  state.SetLabel(dtype_name(dtype));
}
BENCHMARK(BM_PackRows)
    ->ArgName("dtype")
    ->Arg(kQ8)->Arg(kQ4_0)->Arg(kQ4_1)->Arg(kQ5_0)->Arg(int(DType::q5_1))
    ->Arg(int(DType::q2_k))->Arg(int(DType::q3_k))->Arg(kQ4_K)->Arg(int(DType::q5_k))->Arg(kQ6_K)
    ->Unit(benchmark::kMicrosecond);

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
