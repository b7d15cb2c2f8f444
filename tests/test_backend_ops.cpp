// Every op on every backend against its plain-loop reference (kernels/ref/), by NMSE, with guard
// bytes around outputs, shapes that are not multiples of 32, row-strided views, and M in
// {1, 2, 3, 4, 5, 8, 512}. A backend that is not present is reported as skipped, never as passed.
//
// Limits (NMSE = sum((ref - out)^2) / sum(ref^2)), about a hundred times what f32 rounding
// gives on the CPU (measured: element-wise ops up to 9e-15, products and attention up to 9e-14),
// so that a formula that is slightly wrong (an epsilon in the wrong place) does not pass:
//   f32 element-wise ops (norms, RoPE, SwiGLU, add)                          1e-12 (CUDA: 1e-10)
//   f32 reductions (products, attention), 16-bit weights widened on the CPU  1e-11 (CUDA: 1e-9)
//   f16 or bf16 products on CUDA (activations rounded to 16 bits, f32 accumulation):  5e-4
//   f16 KV cache on CUDA (keys, values, and on Tensor Cores q and p, rounded to f16):  5e-4
//   bf16 KV cache on CUDA (the same with 8-bit mantissas):                            2e-3
//   f16 KV cache on the CPU: the stored values are widened exactly, so attention takes the f32
//   reduction limit; keys rotated then stored (rope_kv_store) may round to the neighbouring f16
//   value where the rotation's last bit differs:                                      1e-7
//   quantized products on the CPU (activations rounded to 8 bits per block, as llama.cpp does): 1e-4
//   (q8_0 measured up to 1.7e-5; uniform rounding of activations predicts 1/(4 * 127^2) = 1.6e-5).
//   On CUDA, for every quantized type (q8_0, q4_0 .. q6_k), the weights are dequantized exactly as
//   on the host, so decode (M <= 8, the matvec) takes the f32 limit; prefill rounds weights and
//   activations to f16 and takes the f16 limit.
//   gather_rows, cache stores, argmax, fill: exact.
// Inputs include RMSNorm rows small enough that epsilon matters (|x| < 3e-3: mean(x^2) is
// below eps = 1e-5).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "kernels/ref/add.h"
#include "kernels/ref/argmax.h"
#include "kernels/ref/attention.h"
#include "kernels/ref/gather_rows.h"
#include "kernels/ref/fill.h"
#include "kernels/ref/kv_store.h"
#include "kernels/ref/matmul.h"
#include "kernels/ref/rmsnorm.h"
#include "kernels/ref/rope.h"
#include "kernels/ref/sum.h"
#include "kernels/ref/glu.h"
#include "kernels/ref/matmul_experts.h"
#include "kernels/ref/route_experts.h"
#include "tests/op_harness.h"

namespace minfer::test {
namespace {

enum class Op {
  gather_rows, gather_rows_scaled, gather_rows_packed, rmsnorm, rmsnorm_small, rmsnorm_groups, residual_rmsnorm, matmul, rope, kv_store,
  rope_kv_store, attention_three_pass, attention_online_softmax, attention_prefill, swiglu, geglu, add, add_row, argmax,
  fill, sum, matmul_packed, sigmoid_gate, route_experts, matmul_experts, matmul_experts_weighted,
  matmul_experts_packed
};

const char* op_name(Op op) {
  switch (op) {
    case Op::gather_rows: return "GATHER_ROWS";
    case Op::gather_rows_scaled: return "GATHER_ROWS_SCALED";  // Gemma's embedding scale
    case Op::gather_rows_packed: return "GATHER_ROWS_PACKED";  // from a table the backend packed
    case Op::rmsnorm: return "RMS_NORM";
    case Op::rmsnorm_small: return "RMS_NORM_SMALL_X";
    case Op::rmsnorm_groups: return "RMS_NORM_GROUPS";  // weight (b), each row's a / b runs apart
    case Op::residual_rmsnorm: return "RESIDUAL_RMS_NORM";
    case Op::matmul: return "MUL_MAT";
    case Op::matmul_packed: return "MUL_MAT_PACKED";  // weights the backend packed (pack_weights)
    case Op::rope: return "ROPE";
    case Op::kv_store: return "KV_STORE";
    case Op::rope_kv_store: return "ROPE_KV_STORE";
    case Op::attention_three_pass: return "ATTENTION_THREE_PASS";
    case Op::attention_online_softmax: return "ATTENTION_ONLINE_SOFTMAX";
    case Op::attention_prefill: return "ATTENTION_PREFILL";
    case Op::swiglu: return "SWIGLU";  // glu with silu
    case Op::geglu: return "GEGLU";    // glu with tanh-GELU (Gemma)
    case Op::add: return "ADD";
    case Op::add_row: return "ADD_ROW";  // add with b one row (D), added to every row
    case Op::argmax: return "ARGMAX";
    case Op::fill: return "FILL_UNIFORM";
    case Op::sum: return "SUM";
    case Op::sigmoid_gate: return "SIGMOID_GATE";  // glu with a gate of one column (Qwen2-MoE's shared expert)
    case Op::route_experts: return "ROUTE_EXPERTS";
    case Op::matmul_experts: return "MUL_MAT_EXPERTS";  // a row of out per slot; x one row a row
    case Op::matmul_experts_weighted: return "MUL_MAT_EXPERTS_WEIGHTED";  // x one row a slot, summed by weight
    case Op::matmul_experts_packed: return "MUL_MAT_EXPERTS_PACKED";  // experts the backend packed, weighted
  }
  return "?";
}

// How a case's block tables lay its sequences out over the pool of KV blocks (kernels/ref/kv_store.h):
//   contiguous  sequence s owns blocks s * width .. s * width + width - 1, in order, as a decoder's
//               tables are;
//   scattered   each sequence's blocks drawn at random from a pool twice as large, and -1 in the
//               entries past each sequence's last position (a partly filled table: no kernel may
//               read them);
//   shared      scattered, and the first half of every sequence's blocks are sequence 0's (a
//               shared prefix).
enum class Tables { contiguous, scattered, shared };

// One case: an op, the rows M, up to three sizes, a dtype (weights, table or KV cache), whether
// activations are row-strided views (row stride = cols + 3), for attention a sliding window (its
// cases also scale scores by Gemma's 1/16 instead of 1 / sqrt(head_dim)), and for the cache ops
// their block tables.
struct Case {
  std::string backend;
  Op op;
  int64_t M, a, b, c;
  DType dtype;
  bool strided;
  int64_t window = 0;
  Tables tables = Tables::contiguous;
  int64_t slots = 0;  // the expert ops: experts a row (k of c)
};

std::string case_name(const Case& k);
// Lets gtest print a case by its name (ctest lists tests with their parameter).
void PrintTo(const Case& k, std::ostream* out) { *out << case_name(k); }

std::string case_name(const Case& k) {
  std::ostringstream s;
  std::string backend = k.backend;
  for (auto& ch : backend)
    if (ch == '-') ch = '_';
  s << backend << "_" << op_name(k.op) << "_M" << k.M << "_" << k.a << "x" << k.b;
  if (k.c) s << "x" << k.c;
  s << "_" << dtype_name(k.dtype) << (k.strided ? "_strided" : "");
  if (k.window) s << "_window" << k.window;
  if (k.tables != Tables::contiguous) s << (k.tables == Tables::scattered ? "_scattered" : "_shared");
  if (k.slots) s << "_top" << k.slots;
  return s.str();
}

class BackendOps : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    std::string reason;
    backend_ = backend_by_name(GetParam().backend, &reason);
    if (backend_ == nullptr) GTEST_SKIP() << "skipped: no CUDA device (" << reason << ")";
  }
  int64_t ld(int64_t cols) const { return GetParam().strided ? cols + 3 : cols; }
  // A random activation on the backend as an (M, cols) view with the case's row stride, and the
  // same values on the host (contiguous) for the reference.
  std::pair<Tensor, Tensor> activation(int64_t rows, int64_t cols, float lo = -1.0f, float hi = 1.0f) {
    Tensor host = host_random({rows, cols}, rng_, lo, hi);
    Tensor wide = backend_->empty({rows, ld(cols)}, DType::f32);
    Tensor view = wide.slice(1, 0, cols);
    view.copy_from(host);
    return {view, host};
  }
  Tensor indices(const std::vector<int32_t>& values) {
    Tensor h = host_tensor({int64_t(values.size())}, DType::i32);
    std::copy(values.begin(), values.end(), h.data_as<int32_t>());
    return to_backend(*backend_, h);
  }
  bool cuda() const { return backend_->device() == DeviceKind::cuda; }
  double limit_elementwise() const { return cuda() ? 1e-10 : 1e-12; }
  double limit_reduction() const { return cuda() ? 1e-9 : 1e-11; }
  double limit_product() const {
    const Case& k = GetParam();
    if (is_quantized(k.dtype) && !cuda()) return 1e-4;
    if (is_quantized(k.dtype)) return k.M <= 8 ? limit_reduction() : 5e-4;
    return cuda() && k.dtype != DType::f32 ? 5e-4 : limit_reduction();
  }
  Backend* backend_ = nullptr;
  // The weights on the backend, packed by it for the _PACKED ops (skips where it does not pack them).
  void weights(const Tensor& host, Tensor* w) {
    *w = to_backend(*backend_, host);
    const Op op = GetParam().op;
    if (op != Op::matmul_packed && op != Op::gather_rows_packed && op != Op::matmul_experts_packed) return;
    *w = backend_->pack_weights(*w);
    if (w->row_layout() == RowLayout::file)
      GTEST_SKIP() << "skipped: " << backend_->name() << " does not pack " << dtype_name(host.dtype()) << " in this build";
  }
  std::mt19937 rng_{12345};
};

// llama2.c's RoPE table: theta 10000, no scaling.
void rope_table_default(float* table, int64_t positions, int64_t head_dim) {
  std::vector<float> inv_freq(static_cast<size_t>(head_dim / 2));
  ref::rope_inv_freq_default(inv_freq.data(), head_dim);
  ref::rope_table(table, positions, inv_freq.data(), head_dim);
}

// Positions per block of the harness's caches: shorter than the decoder's (64, engine/kv_cache.h),
// and dividing neither a CPU key chunk (64), a CUDA flash-decoding chunk (its own keys over the
// splits, at least 64) and prefill tile (64), nor the caches' lengths (300, 40, M + 70), so that
// chunks and tiles begin and end inside blocks.
constexpr int64_t kBlock = 24;

struct BlockTables {
  std::vector<int32_t> entries;  // (n_seqs, width)
  int64_t width, n_blocks;
};

// The block tables of n_seqs sequences of n_ctx positions laid out as `tables` says;
// last_pos[s] is the last position sequence s uses (-1: none).
BlockTables block_tables(std::mt19937& rng, Tables tables, int64_t n_seqs, int64_t n_ctx,
                         const std::vector<int32_t>& last_pos) {
  const int64_t width = (n_ctx + kBlock - 1) / kBlock;
  BlockTables t{std::vector<int32_t>(static_cast<size_t>(n_seqs * width)), width, n_seqs * width};
  for (size_t i = 0; i < t.entries.size(); ++i) t.entries[i] = static_cast<int32_t>(i);
  if (tables == Tables::contiguous) return t;
  t.n_blocks = 2 * n_seqs * width;
  std::vector<int32_t> pool(static_cast<size_t>(t.n_blocks));
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<int32_t>(i);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::copy(pool.begin(), pool.begin() + int64_t(t.entries.size()), t.entries.begin());
  if (tables == Tables::shared)
    for (int64_t s = 1; s < n_seqs; ++s)
      std::copy_n(t.entries.begin(), width / 2, t.entries.begin() + s * width);
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int32_t last = last_pos[static_cast<size_t>(s)];
    for (int64_t j = last < 0 ? 0 : last / kBlock + 1; j < width; ++j) t.entries[static_cast<size_t>(s * width + j)] = -1;
  }
  return t;
}

// The last position each of n_seqs sequences is used at by the rows (seq, pos); -1 where none.
std::vector<int32_t> last_positions(int64_t n_seqs, const std::vector<int32_t>& seq, const std::vector<int32_t>& pos) {
  std::vector<int32_t> last(static_cast<size_t>(n_seqs), -1);
  for (size_t m = 0; m < seq.size(); ++m) last[size_t(seq[m])] = std::max(last[size_t(seq[m])], pos[m]);
  return last;
}

// Distinct (seq, pos) pairs for M rows of a cache of n_seqs x n_ctx: what a batch writes in one step.
void distinct_slots(std::mt19937& rng, int64_t M, int64_t n_seqs, int64_t n_ctx,
                    std::vector<int32_t>* seq, std::vector<int32_t>* pos) {
  std::vector<int32_t> slots(static_cast<size_t>(n_seqs * n_ctx));
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<int32_t>(i);
  std::shuffle(slots.begin(), slots.end(), rng);
  for (int64_t m = 0; m < M; ++m) {
    seq->push_back(static_cast<int32_t>(slots[m] / n_ctx));
    pos->push_back(static_cast<int32_t>(slots[m] % n_ctx));
  }
}

// The experts each of M rows chooses, k distinct of E a row, as a router would: uneven (expert 0
// in most rows), and the last expert in none, so that the grouped products see a large group, small
// ones and an empty one.
std::vector<int32_t> expert_choices(std::mt19937& rng, int64_t M, int64_t k, int64_t E) {
  std::vector<int32_t> ids;
  std::vector<int32_t> pool(static_cast<size_t>(E - 1));
  for (int64_t m = 0; m < M; ++m) {
    for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<int32_t>(i);
    std::shuffle(pool.begin() + 1, pool.end(), rng);
    if (m % 3 == 2) std::swap(pool[0], pool[size_t(k)]);  // one row in three without expert 0
    ids.insert(ids.end(), pool.begin(), pool.begin() + k);
  }
  return ids;
}

TEST_P(BackendOps, MatchesReference) {
  const Case& k = GetParam();
  const std::string label = case_name(k);
  const int64_t M = k.M;
  switch (k.op) {
    case Op::gather_rows:
    case Op::gather_rows_scaled:
    case Op::gather_rows_packed: {
      const int64_t D = k.a, V = k.b;
      const float scale = k.op == Op::gather_rows_scaled ? std::sqrt(640.0f) : 1.0f;
      Tensor table = host_random({V, D}, rng_, -1, 1, k.dtype);
      std::vector<int32_t> ids;
      for (int64_t m = 0; m < M; ++m) ids.push_back(static_cast<int32_t>(rng_() % V));
      if (k.op == Op::gather_rows_packed) ids.back() = static_cast<int32_t>(V - 1);  // a row past the last group
      Tensor backend_table;
      weights(table, &backend_table);
      if (IsSkipped()) return;
      GuardedOutput out(*backend_, M, D, ld(D));
      backend_->gather_rows(out.view(), backend_table, indices(ids), scale);
      Tensor expected = host_tensor({M, D}, DType::f32);
      ref::gather_rows(expected.data_as<float>(), D, table.data(), k.dtype, ids.data(), M, D, V, scale);
      expect_close(expected, out.check(label), 0.0, label);
      break;
    }
    case Op::rmsnorm:
    case Op::rmsnorm_small:
    case Op::rmsnorm_groups:
    case Op::residual_rmsnorm: {
      const int64_t D = k.a, G = k.op == Op::rmsnorm_groups ? k.b : D;
      const float range = k.op == Op::rmsnorm_small ? 3e-3f : 2.0f;  // small: eps dominates mean(x^2)
      auto [x, x_host] = activation(M, D, -range, range);
      Tensor w = host_random({G}, rng_, 0.5f, 1.5f);
      GuardedOutput out(*backend_, M, D, ld(D));
      Tensor expected = host_tensor({M, D}, DType::f32);
      if (k.op != Op::residual_rmsnorm) {
        backend_->rmsnorm(out.view(), x, to_backend(*backend_, w), 1e-5f);
      } else {
        auto [delta, delta_host] = activation(M, D);
        backend_->residual_rmsnorm(out.view(), x, delta, to_backend(*backend_, w), 1e-5f);
        ref::add(x_host.data_as<float>(), D, x_host.data_as<float>(), D, delta_host.data_as<float>(),
                 D, M, D);
        expect_close(x_host, to_host(x), limit_elementwise(), label + " (x += delta)");
      }
      ref::rmsnorm(expected.data_as<float>(), D, x_host.data_as<float>(), D, w.data_as<float>(), M,
                   G, 1e-5f, D / G);
      expect_close(expected, out.check(label), limit_elementwise(), label);
      break;
    }
    case Op::matmul:
    case Op::matmul_packed: {
      const int64_t N = k.a, K = k.b;
      auto [x, x_host] = activation(M, K);
      Tensor w = host_random({N, K}, rng_, -1, 1, k.dtype);
      Tensor backend_w;
      weights(w, &backend_w);
      if (IsSkipped()) return;
      GuardedOutput out(*backend_, M, N, ld(N));
      backend_->matmul(out.view(), x, backend_w);
      Tensor expected = host_tensor({M, N}, DType::f32);
      ref::matmul(expected.data_as<float>(), N, x_host.data_as<float>(), K, w.data(), k.dtype, M, N, K);
      expect_close(expected, out.check(label), limit_product(), label);
      break;
    }
    case Op::rope: {
      const int64_t heads = k.a, head_dim = k.b, positions = 97;
      Tensor table = host_tensor({positions, head_dim}, DType::f32);
      rope_table_default(table.data_as<float>(), positions, head_dim);
      std::vector<int32_t> pos;
      for (int64_t m = 0; m < M; ++m) pos.push_back(static_cast<int32_t>(rng_() % positions));
      auto [x, x_host] = activation(M, heads * head_dim);
      GuardedOutput out(*backend_, M, heads * head_dim, ld(heads * head_dim));
      out.fill(x_host);
      backend_->rope(out.view(), indices(pos), to_backend(*backend_, table), head_dim);
      ref::rope(x_host.data_as<float>(), heads * head_dim, pos.data(), table.data_as<float>(), M,
                heads, head_dim);
      expect_close(x_host, out.check(label), limit_elementwise(), label);
      break;
    }
    case Op::kv_store:
    case Op::rope_kv_store: {
      const int64_t heads = k.a, kv_heads = k.b, head_dim = k.c, n_seqs = 3;
      const int64_t n_ctx = std::max<int64_t>(40, (M + n_seqs - 1) / n_seqs);
      const int64_t kv_dim = kv_heads * head_dim;
      std::vector<int32_t> seq, pos;
      distinct_slots(rng_, M, n_seqs, n_ctx, &seq, &pos);
      const BlockTables blocks = block_tables(rng_, k.tables, n_seqs, n_ctx, last_positions(n_seqs, seq, pos));
      const ref::KvBlockTable table_host{blocks.entries.data(), blocks.width, kBlock};
      Tensor block_table = indices(blocks.entries).reshape({n_seqs, blocks.width});
      Tensor k_cache_host = host_random({blocks.n_blocks, kv_heads, kBlock, head_dim}, rng_, -1, 1, k.dtype);
      Tensor v_cache_host = host_random({blocks.n_blocks, kv_heads, kBlock, head_dim}, rng_, -1, 1, k.dtype);
      Tensor k_cache = to_backend(*backend_, k_cache_host), v_cache = to_backend(*backend_, v_cache_host);
      const int64_t cache_rows = blocks.n_blocks * kBlock;
      auto [kx, k_host] = activation(M, kv_dim);
      auto [vx, v_host] = activation(M, kv_dim);
      Tensor table = host_tensor({n_ctx, head_dim}, DType::f32);
      rope_table_default(table.data_as<float>(), n_ctx, head_dim);
      if (k.op == Op::kv_store) {
        backend_->kv_store(k_cache, v_cache, block_table, kx, vx, indices(seq), indices(pos));
      } else {
        auto [q, q_host] = activation(M, heads * head_dim);
        backend_->rope_kv_store(k_cache, v_cache, block_table, q, kx, vx, indices(seq), indices(pos),
                                to_backend(*backend_, table), head_dim);
        ref::rope(q_host.data_as<float>(), heads * head_dim, pos.data(), table.data_as<float>(), M,
                  heads, head_dim);
        ref::rope(k_host.data_as<float>(), kv_dim, pos.data(), table.data_as<float>(), M, kv_heads,
                  head_dim);
        expect_close(q_host, to_host(q), limit_elementwise(), label + " (q)");
        expect_close(k_host, to_host(kx), limit_elementwise(), label + " (k)");
      }
      ref::kv_store(k_cache_host.data(), v_cache_host.data(), k.dtype, k_host.data_as<float>(), kv_dim,
                    v_host.data_as<float>(), kv_dim, seq.data(), pos.data(), M, kv_heads, head_dim, table_host);
      Tensor k_expected = host_tensor({cache_rows, kv_dim}, DType::f32);
      Tensor k_actual = host_tensor({cache_rows, kv_dim}, DType::f32);
      k_expected.convert_from(k_cache_host.reshape({cache_rows, kv_dim}));
      k_actual.convert_from(to_host(k_cache).reshape({cache_rows, kv_dim}));
      // Stored keys are exact copies (rounded to f16 alike); rotated ones (the fused op) differ by
      // float rounding, which in an f16 cache can move a key to the neighbouring f16 value.
      const double rotated_limit = k.dtype == DType::f16 ? 1e-7 : limit_elementwise();
      expect_close(k_expected, k_actual, k.op == Op::kv_store ? 0.0 : rotated_limit, label + " (k cache)");
      Tensor v_expected = host_tensor({cache_rows, kv_dim}, DType::f32);
      Tensor v_actual = host_tensor({cache_rows, kv_dim}, DType::f32);
      v_expected.convert_from(v_cache_host.reshape({cache_rows, kv_dim}));
      v_actual.convert_from(to_host(v_cache).reshape({cache_rows, kv_dim}));
      expect_close(v_expected, v_actual, 0.0, label + " (v cache)");
      break;
    }
    case Op::attention_three_pass:
    case Op::attention_online_softmax:
    case Op::attention_prefill: {
      const int64_t heads = k.a, kv_heads = k.b, head_dim = k.c, n_seqs = 3;
      const int64_t n_ctx = k.op == Op::attention_prefill ? M + 70 : 300;
      const AttentionSpec spec{head_dim, k.window > 0 ? 1.0f / 16.0f : 0.0f, k.window};
      std::vector<int32_t> seq, pos;
      for (int64_t m = 0; m < M; ++m) {
        if (k.op == Op::attention_prefill) {  // a prompt: consecutive positions of one sequence
          seq.push_back(1);
          pos.push_back(static_cast<int32_t>(37 + m));
        } else {
          seq.push_back(static_cast<int32_t>(rng_() % n_seqs));
          pos.push_back(static_cast<int32_t>(m % 7 == 0 ? n_ctx - 1 - rng_() % 3 : rng_() % n_ctx));
        }
      }
      const BlockTables blocks = block_tables(rng_, k.tables, n_seqs, n_ctx, last_positions(n_seqs, seq, pos));
      Tensor k_cache = host_random({blocks.n_blocks, kv_heads, kBlock, head_dim}, rng_, -1, 1, k.dtype);
      Tensor v_cache = host_random({blocks.n_blocks, kv_heads, kBlock, head_dim}, rng_, -1, 1, k.dtype);
      auto [q, q_host] = activation(M, heads * head_dim, -2, 2);
      GuardedOutput out(*backend_, M, heads * head_dim, ld(heads * head_dim));
      backend_->attention(out.view(), q, to_backend(*backend_, k_cache), to_backend(*backend_, v_cache),
                          indices(blocks.entries).reshape({n_seqs, blocks.width}), indices(seq), indices(pos), spec,
                          k.op == Op::attention_three_pass ? AttentionAlgorithm::three_pass
                                                           : AttentionAlgorithm::online_softmax);
      Tensor expected = host_tensor({M, heads * head_dim}, DType::f32);
      ref::attention(expected.data_as<float>(), heads * head_dim, q_host.data_as<float>(),
                     heads * head_dim, k_cache.data(), v_cache.data(), k.dtype,
                     {blocks.entries.data(), blocks.width, kBlock}, seq.data(), pos.data(), M, heads, kv_heads,
                     head_dim, spec.score_scale(), spec.window);
      // f16/bf16 caches: keys and values were rounded on the way in, and the prefill Tensor Core
      // path also rounds q and the probabilities to 16 bits.
      // The CPU widens the stored f16 values exactly and sums in f32, as for an f32 cache.
      const double limit = k.dtype == DType::f32 || !cuda() ? limit_reduction() : k.dtype == DType::f16 ? 5e-4 : 2e-3;
      expect_close(expected, out.check(label), limit, label);
      break;
    }
    case Op::swiglu:
    case Op::geglu:
    case Op::add:
    case Op::add_row: {
      const int64_t F = k.a;
      auto [a, a_host] = activation(M, F, -4, 4);
      auto [b, b_host] = activation(M, F, -4, 4);
      GuardedOutput out(*backend_, M, F, ld(F));
      Tensor expected = host_tensor({M, F}, DType::f32);
      if (k.op == Op::add_row) {
        const Tensor row_host = host_random({F}, rng_, -4, 4);
        backend_->add(out.view(), a, to_backend(*backend_, row_host));
        ref::add(expected.data_as<float>(), F, a_host.data_as<float>(), F, row_host.data_as<float>(), 0, M, F);
      } else if (k.op == Op::swiglu || k.op == Op::geglu) {
        const GluActivation act = k.op == Op::swiglu ? GluActivation::silu : GluActivation::gelu_tanh;
        backend_->glu(out.view(), a, b, act);
        ref::glu(expected.data_as<float>(), F, a_host.data_as<float>(), F, 1, b_host.data_as<float>(), F, M, F, act);
      } else {
        backend_->add(out.view(), a, b);
        ref::add(expected.data_as<float>(), F, a_host.data_as<float>(), F, b_host.data_as<float>(), F,
                 M, F);
      }
      expect_close(expected, out.check(label), limit_elementwise(), label);
      break;
    }
    case Op::sigmoid_gate: {  // out = sigmoid(gate) * up, gate (M, 1)
      const int64_t F = k.a;
      auto [gate, gate_host] = activation(M, 1, -4, 4);
      auto [up, up_host] = activation(M, F, -4, 4);
      GuardedOutput out(*backend_, M, F, ld(F));
      backend_->glu(out.view(), gate, up, GluActivation::sigmoid);
      Tensor expected = host_tensor({M, F}, DType::f32);
      ref::glu(expected.data_as<float>(), F, gate_host.data_as<float>(), 1, 0, up_host.data_as<float>(), F, M, F,
               GluActivation::sigmoid);
      expect_close(expected, out.check(label), limit_elementwise(), label);
      break;
    }
    case Op::route_experts: {
      const int64_t E = k.a, slots = k.slots;
      auto [logits, logits_host] = activation(M, E, -3, 3);
      float* l = logits_host.data_as<float>();
      for (int64_t m = 0; m < M; m += 2) l[m * E + 1] = l[m * E + E - 1] = 9.0f;  // a tie for first: the lower expert first
      Tensor(logits).copy_from(logits_host);
      for (bool normalize : {false, true}) {
        Tensor ids = backend_->empty({M, slots}, DType::i32), weights = backend_->empty({M, slots}, DType::f32);
        backend_->route_experts(ids, weights, logits, normalize);
        std::vector<int32_t> want_ids(static_cast<size_t>(M * slots));
        Tensor want = host_tensor({M, slots}, DType::f32);
        ref::route_experts(want_ids.data(), want.data_as<float>(), l, E, M, E, slots, normalize);
        const Tensor got_ids = to_host(ids);
        for (int64_t i = 0; i < M * slots; ++i)
          ASSERT_EQ(got_ids.data_as<int32_t>()[i], want_ids[size_t(i)]) << label << " slot " << i;
        expect_close(want, to_host(weights), limit_elementwise(), label + (normalize ? " (normalised)" : ""));
      }
      break;
    }
    case Op::matmul_experts:
    case Op::matmul_experts_weighted:
    case Op::matmul_experts_packed: {
      const int64_t N = k.a, K = k.b, E = k.c, slots = k.slots;
      const bool weighted = k.op != Op::matmul_experts;
      auto [x, x_host] = activation(weighted ? M * slots : M, K);
      Tensor w = host_random({E, N, K}, rng_, -1, 1, k.dtype);
      Tensor backend_w;
      weights(w, &backend_w);
      if (IsSkipped()) return;
      const std::vector<int32_t> ids = expert_choices(rng_, M, slots, E);
      Tensor ids_host = host_tensor({M, slots}, DType::i32);
      std::copy(ids.begin(), ids.end(), ids_host.data_as<int32_t>());
      Tensor weights_host = host_random({M, slots}, rng_, 0, 1);
      const int64_t rows = weighted ? M : M * slots;
      GuardedOutput out(*backend_, rows, N, ld(N));
      backend_->matmul_experts(out.view(), x, backend_w, to_backend(*backend_, ids_host),
                               weighted ? to_backend(*backend_, weights_host) : Tensor());
      Tensor expected = host_tensor({rows, N}, DType::f32);
      ref::matmul_experts(expected.data_as<float>(), N, x_host.data_as<float>(), K, weighted, w.data(), k.dtype,
                          ids.data(), weighted ? weights_host.data_as<float>() : nullptr, M, slots, E, N, K);
      expect_close(expected, out.check(label), limit_product(), label);
      break;
    }
    case Op::argmax: {
      const int64_t N = k.a;
      auto [x, x_host] = activation(M, N);
      float* xs = x_host.data_as<float>();
      for (int64_t m = 0; m < M; m += 2) {  // ties in every other row: the first index wins
        int64_t i = rng_() % N, j = rng_() % N;
        xs[m * N + i] = xs[m * N + j] = 5.0f;
      }
      Tensor(x).copy_from(x_host);
      GuardedOutput out(*backend_, 1, M, M, DType::i32);
      backend_->argmax(out.view().reshape({M}), x);
      std::vector<int32_t> expected(static_cast<size_t>(M));
      ref::argmax(expected.data(), xs, N, M, N);
      Tensor actual = out.check(label);
      for (int64_t m = 0; m < M; ++m)
        EXPECT_EQ(actual.data_as<int32_t>()[m], expected[m]) << label << " row " << m;
      break;
    }
    case Op::sum: {
      const int64_t n = M * k.a;
      Tensor x_host = host_random({n}, rng_, -1, 1);
      GuardedOutput out(*backend_, 1, 1, 1);
      backend_->sum(out.view().reshape({1}), to_backend(*backend_, x_host));
      Tensor expected = host_tensor({1, 1}, DType::f32);
      ref::sum(expected.data_as<float>(), x_host.data_as<float>(), n);
      // A sum of n values loses up to about n * 2^-24 of their magnitudes to rounding.
      const float got = out.check(label).data_as<float>()[0], want = expected.data_as<float>()[0];
      EXPECT_NEAR(got, want, 1e-6 * double(n)) << label;
      break;
    }
    case Op::fill: {
      // Seeded weights must be bit-for-bit the same on every backend.
      const int64_t n = M * k.a;
      Tensor t = backend_->empty({n}, k.dtype);
      backend_->fill_uniform(t, 0xfeed + uint64_t(M), -0.3f, 0.7f);
      Tensor expected = host_tensor({n}, k.dtype);
      ref::fill_uniform(expected.data(), k.dtype, n, 0xfeed + uint64_t(M), -0.3f, 0.7f);
      Tensor actual = to_host(t);
      EXPECT_EQ(std::memcmp(expected.data(), actual.data(), expected.nbytes()), 0) << label;
      break;
    }
  }
  if (backend_ != nullptr) backend_->synchronize();
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const int64_t Ms[] = {1, 2, 3, 4, 5, 8, 512};
  for (const std::string backend : {"cpu", "cuda"}) {
    const bool cuda = backend == "cuda";
    for (int64_t M : Ms) {
      bool strided = M == 3 || M == 8;
      for (DType t : {DType::f32, DType::f16, DType::bf16})
        cases.push_back({backend, Op::gather_rows, M, 67, 301, 0, t, strided});
      cases.push_back({backend, Op::gather_rows, M, 96, 301, 0, DType::q8_0, strided});
      for (DType t : {DType::f32, DType::bf16, DType::q8_0})
        cases.push_back({backend, Op::gather_rows_scaled, M, 96, 301, 0, t, strided});
      cases.push_back({backend, Op::rmsnorm, M, 67, 0, 0, DType::f32, strided});
      cases.push_back({backend, Op::rmsnorm, M, 288, 0, 0, DType::f32, !strided});
      cases.push_back({backend, Op::rmsnorm_small, M, 67, 0, 0, DType::f32, strided});
      cases.push_back({backend, Op::rmsnorm_groups, M, 7 * 24, 24, 0, DType::f32, strided});
      cases.push_back({backend, Op::rmsnorm_groups, M, 3 * 128, 128, 0, DType::f32, !strided});
      cases.push_back({backend, Op::residual_rmsnorm, M, 100, 0, 0, DType::f32, strided});
      for (DType t : {DType::f32, DType::f16, DType::bf16}) {
        cases.push_back({backend, Op::matmul, M, 33, 67, 0, t, strided});
        cases.push_back({backend, Op::matmul, M, 100, 288, 0, t, !strided});
      }
      // q8_0 rows are whole blocks of 32: K = 96 and 288 (3 and 9 blocks).
      cases.push_back({backend, Op::matmul, M, 33, 96, 0, DType::q8_0, strided});
      cases.push_back({backend, Op::matmul, M, 100, 288, 0, DType::q8_0, !strided});
      cases.push_back({backend, Op::rope, M, 5, 18, 0, DType::f32, strided});
      cases.push_back({backend, Op::kv_store, M, 4, 2, 10, DType::f32, strided});
      cases.push_back({backend, Op::rope_kv_store, M, 6, 3, 14, DType::f32, strided});
      for (Op op : {Op::attention_three_pass, Op::attention_online_softmax}) {
        cases.push_back({backend, op, M, 8, 4, 8, DType::f32, !strided});  // stories260K's heads
        cases.push_back({backend, op, M, 4, 2, 16, DType::f32, strided});
        cases.push_back({backend, op, M, 6, 6, 34, DType::f32, !strided});
        cases.push_back({backend, op, M, 6, 3, 48, DType::f32, strided});
        if (M <= 8) cases.push_back({backend, op, M, 4, 4, 128, DType::f32, !strided});
        // f16 caches: whole vectors (64), and on the CPU the plain-loop fallback (34), three
        // sets of accumulators on AVX2 (32) and one set of 16 (128)
        cases.push_back({backend, op, M, 8, 2, 64, DType::f16, strided});
        // Sliding windows (with Gemma 3's scale): shorter than most positions (7), longer than a key
        // block of the CPU and a CUDA chunk of 64 keys (100, 257), so that a row's first key falls
        // inside a block or chunk, and as long as the cache (300 = n_ctx: no key masked).
        for (int64_t window : {7, 100, 257, 300}) {
          cases.push_back({backend, op, M, 4, 1, 16, DType::f32, strided, window});
          cases.push_back({backend, op, M, 4, 2, 64, DType::f16, !strided, window});
        }
        if (M <= 8) cases.push_back({backend, op, M, 4, 1, 256, DType::f32, strided, 100});  // Gemma 3's heads
        if (!cuda) {
          cases.push_back({backend, op, M, 6, 3, 34, DType::f16, !strided});
          cases.push_back({backend, op, M, 4, 2, 32, DType::f32, strided});
          cases.push_back({backend, op, M, 4, 2, 32, DType::f16, !strided});
          if (M <= 8) cases.push_back({backend, op, M, 2, 1, 128, DType::f16, strided});
        }
      }
      cases.push_back({backend, Op::kv_store, M, 4, 2, 10, DType::f16, strided});
      cases.push_back({backend, Op::rope_kv_store, M, 6, 3, 14, DType::f16, strided});
      // Block tables that are scattered and partly filled, and shared (attention only: two rows
      // never write one slot), for f32 and 16-bit caches, with and without a window.
      for (DType t : {DType::f32, DType::f16}) {
        cases.push_back({backend, Op::kv_store, M, 4, 2, 10, t, strided, 0, Tables::scattered});
        cases.push_back({backend, Op::rope_kv_store, M, 6, 3, 14, t, !strided, 0, Tables::scattered});
        for (Op op : {Op::attention_three_pass, Op::attention_online_softmax})
          for (Tables tables : {Tables::scattered, Tables::shared}) {
            cases.push_back({backend, op, M, 8, 2, 64, t, strided, 0, tables});
            cases.push_back({backend, op, M, 6, 3, t == DType::f32 ? 34 : 64, t, !strided, 100, tables});
          }
      }
      cases.push_back({backend, Op::swiglu, M, 172, 0, 0, DType::f32, strided});
      cases.push_back({backend, Op::geglu, M, 172, 0, 0, DType::f32, strided});
      cases.push_back({backend, Op::add, M, 67, 0, 0, DType::f32, strided});
      cases.push_back({backend, Op::add_row, M, 67, 0, 0, DType::f32, strided});
      cases.push_back({backend, Op::argmax, M, 1001, 0, 0, DType::f32, strided});
      for (DType t : {DType::f32, DType::f16, DType::bf16})
        cases.push_back({backend, Op::fill, M, 1000, 0, 0, t, false});
      cases.push_back({backend, Op::fill, M, 1024, 0, 0, DType::q8_0, false});
      cases.push_back({backend, Op::sum, M, 70001, 0, 0, DType::f32, false});
    }
  }
  // Batched decode sizes (16 sequences and around it): the CPU's outer-product kernel, with
  // partial row groups, rows left to the dot-product tail (on AVX2 12-14 and 17-20, up to the
  // boundary at 14; on AVX-512 20 and 28, the boundary) and weight rows left over after the
  // tiles of 16.
  for (const std::string backend : {"cpu", "cuda"})
    for (int64_t M : {12, 13, 14, 15, 16, 17, 20, 28, 32}) {
      cases.push_back({backend, Op::matmul, M, 33, 67, 0, DType::f32, M == 17});
      cases.push_back({backend, Op::matmul, M, 100, 288, 0, DType::f32, M != 17});
      cases.push_back({backend, Op::matmul, M, 100, 288, 0, DType::bf16, false});
      cases.push_back({backend, Op::matmul, M, 33, 96, 0, DType::q8_0, M == 17});
    }
  // Prefill-sized products (above 32 rows). On the CPU with AVX2 or AVX-512 they take the panels of
  // 2 vectors of weight rows (16-bit ones widened while packed, K = 99 with a tail of 3 past the
  // vectors) in tiles of 6 (AVX2) or 8 (AVX-512) activation rows, here with 1 to 7 rows left over
  // (M = 33 .. 40) and a partial panel; the panels go 256 values of k at a time, the slices after
  // the first adding to the outputs: K = 600 (slices of 256, 256 and 88) and 8195 (a last slice of
  // 3); M = 300, K = 1001 also runs Eigen's GEMM without AVX2. With AVX-512 the packing transposes
  // blocks of 16 weight rows: past a whole panel of 32 (two blocks), N = 41 leaves a partial panel
  // of 9 (no block), 57 one of 25 (a block and 9 rows), 48 one of 16 (a block and nothing else).
  for (const std::string backend : {"cpu", "cuda"}) {
    cases.push_back({backend, Op::matmul, 300, 33, 1001, 0, DType::f32, true});
    for (int64_t M = 33; M <= 40; ++M) {
      cases.push_back({backend, Op::matmul, M, 41, 96, 0, DType::f32, M % 2 == 1});
      cases.push_back({backend, Op::matmul, M, 41, 8195, 0, DType::f32, M % 2 == 0});
      for (DType t : {DType::f16, DType::bf16}) {
        cases.push_back({backend, Op::matmul, M, 41, 99, 0, t, M % 2 == 0});
        cases.push_back({backend, Op::matmul, M, 41, 600, 0, t, M % 2 == 1});
      }
      cases.push_back({backend, Op::matmul, M, 57, 600, 0, DType::f32, M % 2 == 0});
      cases.push_back({backend, Op::matmul, M, 48, 600, 0, DType::bf16, M % 2 == 1});
    }
  }
  // The 4- to 6-bit GGUF types on the CPU and CUDA: rows of 3 and 9 blocks of 32, or 2 super-blocks
  // of 256; decode, batched decode and prefill (M = 100: past one dequantized tile of 256 weight
  // rows on the CPU, with a partial last tile; M = 33 to 35: the integer GEMM's tiles of 4 rows
  // with 1 to 3 left over, and 57 columns, a strip of 32 and one of 25; on the CPU the integer GEMM
  // takes over from the dot products at 5 to 24 rows by type with AVX-512 VNNI, 5 to 33 with AVX2
  // (quant_gemm_min_rows), so 5 to 7, 9, 17, 21 and 25 put its tiles of 4 rows with 1 to 3 left
  // over near those boundaries; on CUDA M <= 8 is the matvec, 9 to 64 gemm_quant_rows, above it
  // the f16 slabs and cuBLASLt).
  for (const std::string backend : {"cpu", "cuda"})
    for (DType t : {DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_k, DType::q3_k, DType::q4_k,
                    DType::q5_k, DType::q6_k}) {
      const int64_t K = is_k_quant(t) ? 512 : 96;
      for (int64_t M : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 21, 25, 32, 33, 34, 35, 100})
        cases.push_back({backend, Op::matmul, M, M == 100 ? 300 : M > 32 ? 57 : 33,
                         M == 5 && !is_k_quant(t) ? 288 : K, 0, t, M == 3 || M == 17 || M == 34});
      for (int64_t M : {1, 5})
        cases.push_back({backend, Op::gather_rows, M, K, 301, 0, t, M == 5});
      cases.push_back({backend, Op::fill, 1, 1024, 0, 0, t, false});  // K-quants: synthetic blocks
    }
  // Weights the CPU backend packs at load (kernels/cpu/quant/packed.h), every quantized type: groups
  // of 16 weight rows and the rows past the last group in the file's layout (N = 37: 2 groups and
  // 5 rows; 16: one group; 7: no group), for 1 to 40 activation rows; and a table's rows unpacked
  // (one of the ids its last row, past the last group), exactly as from the file's layout.
  for (DType t : {DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_k, DType::q3_k, DType::q4_k,
                  DType::q5_k, DType::q6_k}) {
    const int64_t K = is_k_quant(t) ? 512 : 96;
    for (auto [M, N] : {std::pair<int64_t, int64_t>{1, 37}, {3, 16}, {17, 37}, {40, 7}, {40, 37}})
      cases.push_back({"cpu", Op::matmul_packed, M, N, K, 0, t, M == 3});
    cases.push_back({"cpu", Op::gather_rows_packed, 5, K, 37, 0, t, true});
  }
  // A mixture of experts' ops: routing with k of E (E = 8, 60; k = 1, 3, 8 = all of E), ties for
  // first in every other row; the expert product with uneven groups and an empty one
  // (expert_choices), for decode, batched decode and prefill rows, in every type, the gate's and
  // up's form (a row of out per slot) and the down projection's (x a row per slot, summed by
  // weight), and on the CPU from experts it packed (N = 37: two groups of 16 and 5 rows past them).
  for (const std::string backend : {"cpu", "cuda"}) {
    for (int64_t M : {1, 3, 8, 100}) {
      cases.push_back({backend, Op::sigmoid_gate, M, 67, 0, 0, DType::f32, M == 3});
      for (auto [E, slots] : {std::pair<int64_t, int64_t>{8, 1}, {8, 3}, {8, 8}, {60, 3}})
        cases.push_back({backend, Op::route_experts, M, E, 0, 0, DType::f32, M == 3, 0, Tables::contiguous, slots});
      for (DType t : {DType::f32, DType::f16, DType::q8_0, DType::q4_0, DType::q4_k, DType::q6_k}) {
        const int64_t K = is_k_quant(t) ? 512 : 96;
        for (Op op : {Op::matmul_experts, Op::matmul_experts_weighted})
          cases.push_back({backend, op, M, 37, K, 6, t, M == 8, 0, Tables::contiguous, 3});
      }
    }
  }
  for (DType t : {DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q4_k, DType::q6_k})
    for (int64_t M : {1, 5, 40})
      cases.push_back({"cpu", Op::matmul_experts_packed, M, 37, is_k_quant(t) ? 512 : 96, 6, t, M == 5, 0,
                       Tables::contiguous, 2});
  // q8_0 prefill past one dequantized tile of 256 weight rows on the CPU, with a partial last tile,
  // and through the integer GEMM's tiles with rows left over.
  for (const std::string backend : {"cpu", "cuda"}) {
    cases.push_back({backend, Op::matmul, 100, 300, 320, 0, DType::q8_0, true});
    cases.push_back({backend, Op::matmul, 35, 57, 320, 0, DType::q8_0, false});
  }
  // Prefill-shaped rows (consecutive positions of one sequence): on CUDA the Tensor Core tiles of
  // 64 rows for 16-bit caches of head_dim 64 and 128, full (512) and partial (100, 130), and
  // flash-decoding for f32 caches.
  for (const std::string backend : {"cpu", "cuda"})
    for (int64_t M : {8, 100, 130, 512}) {
      cases.push_back({backend, Op::attention_prefill, M, 8, 2, 64, DType::f32, false});
      // Windows of 20, shorter than every row's position (37 on), and of 130, which the rows past
      // position 129 slide in (M = 100 and up). On CUDA these f32 caches take flash-decoding; the
      // f16 and bf16 cases with a window of 100 below take the Tensor Core tiles, from the tile
      // that holds the first row's first key.
      for (int64_t window : {20, 130}) cases.push_back({backend, Op::attention_prefill, M, 4, 2, 64, DType::f32, false, window});
      if (backend == "cpu") cases.push_back({backend, Op::attention_prefill, M, 4, 2, 64, DType::f16, false});
      for (Tables tables : {Tables::scattered, Tables::shared})
        for (DType t : {DType::f32, DType::f16}) {
          cases.push_back({backend, Op::attention_prefill, M, 8, 2, 64, t, false, 0, tables});
          cases.push_back({backend, Op::attention_prefill, M, 4, 2, 64, t, false, 100, tables});
        }
      if (backend == "cuda")
        for (DType t : {DType::f16, DType::bf16})
          for (int64_t hd : {64, 128}) {
            cases.push_back({backend, Op::attention_prefill, M, 4, 2, hd, t, false});
            cases.push_back({backend, Op::attention_prefill, M, 4, 2, hd, t, false, 100});
          }
    }
  // The hand-written CUDA matrix products (mma is f16-only: Tensor Cores).
  for (const std::string backend : {"cuda-naive", "cuda-tiled", "cuda-mma"})
    for (int64_t M : Ms)
      for (DType t : {DType::f32, DType::f16}) {
        if (backend == "cuda-mma" && t != DType::f16) continue;
        cases.push_back({backend, Op::matmul, M, 33, 67, 0, t, M == 3});
        cases.push_back({backend, Op::matmul, M, 100, 288, 0, t, M == 8});
      }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, BackendOps, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& param_info) {
                           return case_name(param_info.param);
                         });

// The same inputs give bitwise the same outputs however the thread pool hands out the work: no
// result may depend on which thread ran a task (e.g. through a scratch buffer's alignment).
TEST(BackendOpsReproducible, CpuResultsAreBitwiseIdentical) {
  std::string reason;
  Backend& cpu = *backend_by_name("cpu", &reason);
  std::mt19937 rng(3);
  const int64_t M = 37, heads = 6, kv_heads = 2, head_dim = 40, n_ctx = 200;
  Tensor q = to_backend(cpu, host_random({M, heads * head_dim}, rng));
  Tensor k_cache = to_backend(cpu, host_random({2, kv_heads, n_ctx, head_dim}, rng));
  Tensor v_cache = to_backend(cpu, host_random({2, kv_heads, n_ctx, head_dim}, rng));
  Tensor seq = cpu.empty({M}, DType::i32), pos = cpu.empty({M}, DType::i32), blocks = cpu.empty({2, 1}, DType::i32);
  blocks.data_as<int32_t>()[0] = 1;  // each sequence one block of 200 positions, in swapped order
  blocks.data_as<int32_t>()[1] = 0;
  for (int64_t m = 0; m < M; ++m) {
    seq.data_as<int32_t>()[m] = static_cast<int32_t>(m % 2);
    pos.data_as<int32_t>()[m] = static_cast<int32_t>(n_ctx - 1 - m);
  }
  Tensor x = to_backend(cpu, host_random({M, 333}, rng));
  Tensor w = to_backend(cpu, host_random({129, 333}, rng, -1, 1, DType::bf16));
  auto run = [&](Tensor* att, Tensor* fused, Tensor* product) {
    *att = cpu.empty({M, heads * head_dim}, DType::f32);
    *fused = cpu.empty({M, heads * head_dim}, DType::f32);
    *product = cpu.empty({M, 129}, DType::f32);
    cpu.attention(*att, q, k_cache, v_cache, blocks, seq, pos, {head_dim}, AttentionAlgorithm::three_pass);
    cpu.attention(*fused, q, k_cache, v_cache, blocks, seq, pos, {head_dim}, AttentionAlgorithm::online_softmax);
    cpu.matmul(*product, x, w);
  };
  Tensor att0, fused0, product0;
  run(&att0, &fused0, &product0);
  for (int round = 0; round < 30; ++round) {
    Tensor att, fused, product;
    run(&att, &fused, &product);
    ASSERT_EQ(std::memcmp(att.data(), att0.data(), att.nbytes()), 0) << "attention, round " << round;
    ASSERT_EQ(std::memcmp(fused.data(), fused0.data(), fused.nbytes()), 0) << "fused attention, round " << round;
    ASSERT_EQ(std::memcmp(product.data(), product0.data(), product.nbytes()), 0) << "matmul, round " << round;
  }
}

// The one RoPE table every backend reads, against cos and sin of p / 10000^(2j / head_dim)
// computed here in double. The table is built in float as run.c does (the angle p * freq rounded
// to float), which costs up to about p * 2^-23 of absolute error; a wrong frequency costs O(1).
TEST(RopeTable, MatchesCosAndSinComputedInDouble) {
  for (int64_t head_dim : {8, 48, 64, 128}) {
    const int64_t positions = 4096, half = head_dim / 2;
    std::vector<float> table(static_cast<size_t>(positions * head_dim));
    rope_table_default(table.data(), positions, head_dim);
    double worst = 0.0;
    for (int64_t p = 0; p < positions; ++p)
      for (int64_t j = 0; j < half; ++j) {
        const double angle = double(p) / std::pow(10000.0, double(2 * j) / double(head_dim));
        const double tolerance = 1e-6 + 3e-7 * double(p);
        const float* pair = &table[static_cast<size_t>((p * half + j) * 2)];
        const double error = std::max(std::fabs(pair[0] - std::cos(angle)), std::fabs(pair[1] - std::sin(angle)));
        worst = std::max(worst, error / tolerance);
        if (error > tolerance) {
          ADD_FAILURE() << "head_dim " << head_dim << ", position " << p << ", pair " << j << ": (" << pair[0] << ", "
                        << pair[1] << ") against (" << std::cos(angle) << ", " << std::sin(angle) << ")";
          return;
        }
      }
    EXPECT_LE(worst, 1.0) << "head_dim " << head_dim;
  }
}

// The shared shape checks refuse mismatched calls with a message naming the op.
TEST(BackendOpsChecks, MismatchedShapesAreRefused) {
  std::string reason;
  Backend& cpu = *backend_by_name("cpu", &reason);
  Tensor out = cpu.empty({3, 10}, DType::f32), x = cpu.empty({3, 12}, DType::f32);
  Tensor w = cpu.empty({10, 11}, DType::f32);
  try {
    cpu.matmul(out, x, w);
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("matmul"), std::string::npos) << e.what();
  }
  Tensor ids = cpu.empty({3}, DType::i32);
  ids.data_as<int32_t>()[0] = 0;
  ids.data_as<int32_t>()[1] = 11;  // out of range for a 10-row table
  ids.data_as<int32_t>()[2] = 0;
  Tensor table = cpu.empty({10, 10}, DType::f32);
  EXPECT_THROW(cpu.gather_rows(out, table, ids, 1.0f), Error);
  Tensor cache = cpu.empty({2, 1, 2, 8}, DType::f32);  // two blocks of two positions
  Tensor blocks = cpu.empty({1, 2}, DType::i32);          // one sequence of four positions
  blocks.data_as<int32_t>()[0] = 1;
  blocks.data_as<int32_t>()[1] = 0;
  Tensor pos = cpu.empty({3}, DType::i32), seq = cpu.empty({3}, DType::i32);
  for (int i = 0; i < 3; ++i) {
    seq.data_as<int32_t>()[i] = 0;
    pos.data_as<int32_t>()[i] = 4;  // beyond a 4-position cache
  }
  Tensor q = cpu.empty({3, 16}, DType::f32), o = cpu.empty({3, 16}, DType::f32);
  const auto attend = [&](AttentionSpec spec) { cpu.attention(o, q, cache, cache, blocks, seq, pos, spec, AttentionAlgorithm::three_pass); };
  EXPECT_THROW(attend({8}), Error);
  for (int i = 0; i < 3; ++i) pos.data_as<int32_t>()[i] = 3;
  EXPECT_NO_THROW(attend({8, 0.0f, 2}));
  EXPECT_THROW(attend({8, 0.0f, -1}), Error);
  // A table entry outside the pool, among the keys a row reads, is refused; outside the keys
  // (before a window's first key, or past the position) it is never read and allowed.
  blocks.data_as<int32_t>()[0] = 2;
  EXPECT_THROW(attend({8}), Error);
  EXPECT_NO_THROW(attend({8, 0.0f, 2}));
  seq.data_as<int32_t>()[1] = 1;  // a sequence the table does not have
  EXPECT_THROW(attend({8, 0.0f, 2}), Error);
  // An unassigned entry (-1) among the keys read, or where a row is stored, is refused too.
  seq.data_as<int32_t>()[1] = 0;
  blocks.data_as<int32_t>()[0] = 1;
  blocks.data_as<int32_t>()[1] = -1;
  EXPECT_THROW(attend({8, 0.0f, 2}), Error);
  Tensor kv = cpu.empty({3, 8}, DType::f32);
  EXPECT_THROW(cpu.kv_store(cache, cache, blocks, kv, kv, seq, pos), Error);
  for (int i = 0; i < 3; ++i) pos.data_as<int32_t>()[i] = 1;
  EXPECT_NO_THROW(cpu.kv_store(cache, cache, blocks, kv, kv, seq, pos));
  // A norm's weight must divide the row; the fused residual norm takes only a whole row's.
  EXPECT_THROW(cpu.rmsnorm(o, q, cpu.empty({5}, DType::f32), 1e-5f), Error);
  EXPECT_NO_THROW(cpu.rmsnorm(o, q, cpu.empty({8}, DType::f32), 1e-5f));
  EXPECT_THROW(cpu.residual_rmsnorm(o, q, q, cpu.empty({8}, DType::f32), 1e-5f), Error);
  // A bias row must be as wide as the rows it is added to.
  EXPECT_THROW(cpu.add(o, q, cpu.empty({15}, DType::f32)), Error);
  EXPECT_NO_THROW(cpu.add(o, q, cpu.empty({16}, DType::f32)));
}

}  // namespace
}  // namespace minfer::test
