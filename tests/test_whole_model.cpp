// Whole models on random weights, no golden file needed: the reference backend (kernels/ref on
// one thread, model/llama.cpp and the decoder) against an independent run.c-style forward pass
// (model/naive_llama.h), and the CPU and CUDA backends against the reference backend.
// The models have grouped-query and multi-query attention, separate classifiers, several
// sequences at different positions, batched, chunked and one-by-one prefill, and weights strong
// enough that the logits depend on the tokens and their positions (checked first).
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "engine/backend.h"
#include "engine/decoder.h"
#include "model/llama.h"
#include "model/llama_cost.h"
#include "model/presets.h"
#include "tests/greedy_check.h"
#include "tests/random_llama.h"
#include "tests/op_harness.h"
#include "tests/test_support.h"

namespace minfer::test {
namespace {

LlamaConfig shape(int64_t dim, int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads, int64_t vocab,
                  bool shared) {
  LlamaConfig c;
  c.dim = dim;
  c.hidden_dim = hidden;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.vocab_size = vocab;
  c.n_ctx = 40;
  c.shared_classifier = shared;
  return c;
}

struct Named {
  const char* name;
  LlamaConfig config;
  bool rotate_half = false;  // weights in Hugging Face's layout, permuted by LlamaModel at upload
  float norm_offset = 0.0f;  // LlamaHostWeights::norm_weight_offset: 1 as in Gemma's checkpoints
};

// The constants of Hugging Face's models: heads whose width is not dim / heads, another theta,
// Llama 3.1's frequency scaling, another epsilon.
LlamaConfig llama3_like(LlamaConfig c) {
  c.head_size = 24;
  c.rope_theta = 500000.0;
  c.rope_scaling.type = RopeScaling::Type::llama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.original_max_positions = 16;  // short, so that the 40 positions reach the scaled band
  c.rms_eps = 1e-6f;
  c.bos_id = 0;
  c.stop_ids = {3};
  return c;
}

LlamaConfig linear_scaled(LlamaConfig c) {
  c.rope_scaling.type = RopeScaling::Type::linear;
  c.rope_scaling.factor = 4.0;
  return c;
}

// Qwen2's difference: q, k and v each add a bias (added before RoPE, so the rotate-half
// permutation must reorder the q and k biases too).
LlamaConfig qwen2_like(LlamaConfig c) {
  c.qkv_bias = true;
  c.rope_theta = 1000000.0;
  c.rms_eps = 1e-6f;
  return c;
}

// Qwen3's: an RMSNorm of every head of q and k before RoPE (permuted with the rows under
// rotate-half), heads wider than dim / heads.
LlamaConfig qwen3_like(LlamaConfig c) {
  c.qk_norm = true;
  c.head_size = 32;
  c.rope_theta = 1000000.0;
  c.rms_eps = 1e-6f;
  return c;
}

// Gemma 3's: q, k norms and post norms, GeGLU, embeddings scaled by sqrt(dim), its own score
// scale, and layers 0 and 1 of 3 attending in a window of 5 keys (the prompts reach 16 positions)
// with their own RoPE base, unscaled, where the global layer's is linearly scaled.
LlamaConfig gemma3_like(LlamaConfig c) {
  c.qk_norm = c.post_norms = true;
  c.head_size = 32;
  c.activation = GluActivation::gelu_tanh;
  c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
  c.attention_scale = 0.3f;
  c.sliding_window = 5;
  c.sliding_layers = {true, true, false};
  c.rope_theta = 1000000.0;
  c.rope_scaling.type = RopeScaling::Type::linear;
  c.rope_scaling.factor = 8.0;
  c.rope_theta_sliding = 10000.0;
  c.rms_eps = 1e-6f;
  return c;
}

// The mixtures of experts (the router of each layer picks k of E experts a token), in each
// family's form: Qwen3-MoE's renormalised top 3 of 8 with per-head q, k norms and a dense middle
// layer (mlp_only_layers); OLMoE's top 2 of 8, not renormalised, with q and k norms over the whole
// projection; Mixtral's top 2 of 8, renormalised, 8/2 heads; Qwen2-MoE's top 3 of 6 with biases
// and a shared expert under a sigmoid gate. Expert widths 40 and 24: not whole tiles.
LlamaConfig with_experts(LlamaConfig c, int64_t E, int64_t k, int64_t f, bool normalize) {
  c.n_experts = E;
  c.n_experts_used = k;
  c.expert_hidden_dim = f;
  c.normalize_expert_weights = normalize;
  c.rope_theta = 1000000.0;
  c.rms_eps = 1e-6f;
  return c;
}
LlamaConfig qwen3_moe_like(LlamaConfig c) {
  c = with_experts(qwen3_like(c), 8, 3, 40, true);
  c.dense_ffn_layers = {false, true, false};
  return c;
}
LlamaConfig olmoe_like(LlamaConfig c) {
  c = with_experts(c, 8, 2, 40, false);
  c.qk_norm = c.qk_norm_whole = true;
  return c;
}
LlamaConfig qwen2_moe_like(LlamaConfig c) {
  c = with_experts(qwen2_like(c), 6, 3, 24, false);
  c.shared_expert_hidden_dim = 48;
  return c;
}

const std::vector<Named>& shapes() {
  static const std::vector<Named> all = {
      {"multi-head, shared classifier", shape(64, 160, 2, 4, 4, 97, true)},
      {"grouped-query 8/2, separate classifier", shape(64, 172, 2, 8, 2, 101, false)},
      {"multi-query 6/1, separate classifier", shape(48, 100, 3, 6, 1, 83, false)},
      {"llama3-like: 4/2 heads of 24, theta 5e5, llama3 scaling, rotate-half weights",
       llama3_like(shape(64, 160, 2, 4, 2, 89, false)), true},
      {"linear rope scaling, rotate-half weights, shared classifier", linear_scaled(shape(48, 128, 2, 4, 4, 79, true)),
       true},
      {"qwen2-like: q, k, v biases, 4/2 heads, rotate-half weights", qwen2_like(shape(64, 160, 2, 4, 2, 91, false)),
       true},
      {"qwen3-like: q, k norms per head, 4/2 heads of 32, rotate-half weights",
       qwen3_like(shape(64, 160, 2, 4, 2, 93, true)), true},
      {"gemma3-like: post norms, GeGLU, scaled embeddings, windows of 5 in 2 layers of 3, norms as 1 + w",
       gemma3_like(shape(64, 160, 3, 4, 1, 95, true)), true, 1.0f},
      {"qwen3-moe-like: top 3 of 8 experts renormalised, q, k norms per head, a dense middle layer, rotate-half",
       qwen3_moe_like(shape(64, 96, 3, 4, 2, 97, true)), true},
      {"olmoe-like: top 2 of 8 experts, q, k norms over the whole projection, rotate-half",
       olmoe_like(shape(64, 96, 2, 4, 2, 89, false)), true},
      {"mixtral-like: top 2 of 8 experts renormalised, 8/2 heads", with_experts(shape(64, 40, 2, 8, 2, 91, false), 8, 2, 40, true)},
      {"qwen2-moe-like: top 3 of 6 experts, a shared expert under a sigmoid gate, biases, rotate-half",
       qwen2_moe_like(shape(64, 96, 2, 4, 2, 83, false)), true},
  };
  return all;
}

LlamaHostWeights weights_for(const Named& n, uint64_t seed) {
  LlamaHostWeights w = random_llama_weights(n.config, seed, 2.5);
  w.rotate_half = n.rotate_half;
  w.norm_weight_offset = n.norm_offset;
  return w;
}

// Three sequences: prompts of 7, 1 and 12 tokens, then four decode steps.
struct Script {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> steps;  // steps[i][s]: the token sequence s is fed at step i
};

Script make_script(int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  auto token = [&] { return static_cast<int32_t>(rng() % vocab); };
  Script s;
  for (int64_t length : {7, 1, 12}) {
    std::vector<int32_t> p;
    for (int64_t i = 0; i < length; ++i) p.push_back(token());
    s.prompts.push_back(p);
  }
  for (int step = 0; step < 4; ++step) s.steps.push_back({token(), token(), token()});
  return s;
}

// logits[step][seq]: after the prompt (step 0) and after each decode step.
using Logits = std::vector<std::vector<std::vector<double>>>;

Logits naive_logits(const LlamaHostWeights& w, const Script& script) {
  Logits out(script.steps.size() + 1);
  for (size_t s = 0; s < script.prompts.size(); ++s) {
    NaiveLlama model(w);
    int64_t pos = 0;
    std::vector<double> last;
    for (int32_t t : script.prompts[s]) last = naive_forward(model, t, pos++);
    out[0].push_back(last);
    for (size_t i = 0; i < script.steps.size(); ++i) out[i + 1].push_back(naive_forward(model, script.steps[i][s], pos++));
  }
  return out;
}

struct RunOptions {
  std::optional<DType> dtype = DType::f32;  // unset: each weight as the host holds it
  Kernels kernels = Kernels::fused;
  int64_t pass_rows = 2048;
  bool one_by_one = false;  // prompts fed a token per forward pass (all equal length only)
  std::optional<DType> kv_dtype;  // unset: f32, or on CUDA the 16-bit weights' type
};

Logits decoder_logits(Backend& backend, const LlamaHostWeights& w, const Script& script, const RunOptions& o) {
  LlamaOptions lo;
  lo.dtype = o.dtype;
  lo.kernels = o.kernels;
  LlamaModel model(backend, w, "random", lo);
  DecoderOptions dec;
  dec.n_seqs = static_cast<int64_t>(script.prompts.size());
  dec.pass_rows = o.pass_rows;
  dec.kv_dtype = DType::f32;
  if (backend.kind() == BackendKind::cuda && o.dtype && *o.dtype != DType::f32) dec.kv_dtype = *o.dtype;
  if (o.kv_dtype) dec.kv_dtype = o.kv_dtype;
  Decoder decoder(model, dec);
  Logits out;
  auto collect = [&] {
    std::vector<std::vector<double>> rows;
    for (int64_t s = 0; s < decoder.n_seqs(); ++s) {
      const float* l = decoder.logits(s);
      rows.emplace_back(l, l + model.info().vocab_size);
    }
    out.push_back(rows);
  };
  decoder.prefill(script.prompts);
  collect();
  for (const auto& step : script.steps) {
    decoder.decode(step);
    collect();
  }
  return out;
}

double nmse(const std::vector<double>& expected, const std::vector<double>& actual) {
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) {
    err += (expected[i] - actual[i]) * (expected[i] - actual[i]);
    norm += expected[i] * expected[i];
  }
  return err / norm;
}

// The largest NMSE of any step's row of logits.
double worst_nmse(const Logits& expected, const Logits& actual) {
  double worst = 0.0;
  for (size_t step = 0; step < expected.size(); ++step)
    for (size_t s = 0; s < expected[step].size(); ++s) worst = std::max(worst, nmse(expected[step][s], actual[step][s]));
  return worst;
}

void expect_logits_close(const Logits& expected, const Logits& actual, double limit, const std::string& label) {
  ASSERT_EQ(expected.size(), actual.size()) << label;
  double worst = 0.0;
  for (size_t step = 0; step < expected.size(); ++step)
    for (size_t s = 0; s < expected[step].size(); ++s) {
      const double e = nmse(expected[step][s], actual[step][s]);
      EXPECT_LE(e, limit) << label << ": step " << step << ", sequence " << s;
      worst = std::max(worst, e);
    }
  ::testing::Test::RecordProperty(label, std::to_string(worst));
  if (std::getenv("MINFER_TEST_VERBOSE")) std::printf("%s: worst NMSE %.3g\n", label.c_str(), worst);
}

// The CPU backend's logits against `expected` with both kernel sets, in one prefill pass and in
// chunks of 5 rows.
void expect_cpu_variants_close(const Logits& expected, Backend& cpu, const LlamaHostWeights& w, const Script& script,
                               const RunOptions& base, double limit, const std::string& label) {
  for (Kernels kernels : {Kernels::fused, Kernels::unfused})
    for (int64_t rows : {2048, 5}) {
      RunOptions o = base;
      o.kernels = kernels;
      o.pass_rows = rows;
      expect_logits_close(expected, decoder_logits(cpu, w, script, o), limit,
                          label + ", " + kernels_name(kernels) + ", prefill chunks of " + std::to_string(rows));
    }
}

// Before trusting the comparisons: the same token gives clearly different logits at different
// positions and after different histories, so a misplaced row could not go unnoticed.
TEST(WholeModel, RandomModelsAreSensitiveToTokensAndPositions) {
  for (const Named& n : shapes()) {
    LlamaHostWeights w = weights_for(n, 11);
    NaiveLlama a(w), b(w);
    std::vector<double> at0 = naive_forward(a, 5, 0), a1 = naive_forward(a, 9, 1), a2 = naive_forward(a, 5, 2);
    std::vector<double> b0 = naive_forward(b, 7, 0), b1 = naive_forward(b, 9, 1);
    EXPECT_GT(nmse(at0, a2), 0.05) << n.name << ": token 5 at positions 0 and 2";
    EXPECT_GT(nmse(a1, b1), 0.05) << n.name << ": token 9 after different histories";
  }
}

TEST(WholeModel, RefBackendMatchesTheNaiveForwardPass) {
  auto ref = make_backend(BackendKind::ref);
  for (const Named& n : shapes()) {
    LlamaHostWeights w = weights_for(n, 21);
    Script script = make_script(n.config.vocab_size, 5);
    Logits expected = naive_logits(w, script);
    for (Kernels kernels : {Kernels::fused, Kernels::unfused})
      for (int64_t rows : {2048, 5}) {
        RunOptions o;
        o.kernels = kernels;
        o.pass_rows = rows;
        expect_logits_close(expected, decoder_logits(*ref, w, script, o), 1e-11,
                            std::string(n.name) + ", " + kernels_name(kernels) + ", prefill chunks of " +
                                std::to_string(rows));
      }
  }
}

// Limits against the reference backend: f32 arithmetic (float rounding in every op, different
// summation orders) stays within 1e-10 of double accumulation on these sizes; 16-bit weights are
// widened exactly on the CPU, so the same limit holds. (Measured: at most 6e-12.)
TEST(WholeModel, CpuBackendMatchesTheReferenceBackend) {
  auto ref = make_backend(BackendKind::ref);
  BackendOptions options;
  options.threads = 2;
  auto cpu = make_backend(BackendKind::cpu, options);
  for (const Named& n : shapes()) {
    LlamaHostWeights w = weights_for(n, 31);
    Script script = make_script(n.config.vocab_size, 6);
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      RunOptions base;
      base.dtype = dtype;
      expect_cpu_variants_close(decoder_logits(*ref, w, script, base), *cpu, w, script, base, 1e-10,
                                std::string(n.name) + ", " + dtype_name(dtype));
    }
  }
}

// An f16 KV cache on the CPU against the reference backend with the same f16 cache: the values
// stored are the same f16 numbers (a key whose rotation differs in its last bit may round to the
// neighbouring one), and the sums are f32 against double: measured up to 6e-9 for the dense
// shapes and 5.8e-8 for the mixtral-like one, limit 1e-7. An f32 cache is further away than the
// limit (3.3e-7 to 1.1e-5), so a cache that silently stayed f32 would fail.
TEST(WholeModel, CpuF16CacheMatchesTheReferenceWithAnF16Cache) {
  auto ref = make_backend(BackendKind::ref);
  BackendOptions options;
  options.threads = 2;
  auto cpu = make_backend(BackendKind::cpu, options);
  for (const Named& n : shapes()) {
    LlamaHostWeights w = weights_for(n, 37);
    Script script = make_script(n.config.vocab_size, 6);
    RunOptions f16_cache;
    f16_cache.kv_dtype = DType::f16;
    Logits expected = decoder_logits(*ref, w, script, f16_cache);
    expect_cpu_variants_close(expected, *cpu, w, script, f16_cache, 1e-7, std::string(n.name) + ", f16 cache");
    const double furthest = worst_nmse(expected, decoder_logits(*cpu, w, script, RunOptions{}));
    if (std::getenv("MINFER_TEST_VERBOSE")) std::printf("%s: f32 cache against f16, worst NMSE %.3g\n", n.name, furthest);
    EXPECT_GT(furthest, 2e-7) << n.name << ": an f32 cache gives the f16 cache's logits";
  }
}

// On CUDA, 16-bit weights also mean 16-bit activations in the Tensor Core products and a 16-bit
// KV cache: the limits follow the op harness's (5e-4 per f16 op, a few ops deep).
TEST(WholeModel, CudaBackendMatchesTheReferenceBackend) {
  std::string reason;
  if (cuda_device_count(&reason) == 0) GTEST_SKIP() << "skipped: no CUDA device (" << reason << ")";
  auto ref = make_backend(BackendKind::ref);
  for (const char* gemm : {"cublas", "tiled"}) {
    BackendOptions options;
    options.gemm = parse_gemm(gemm);
    auto cuda = make_backend(BackendKind::cuda, options);
    for (const Named& n : shapes()) {
      LlamaHostWeights w = weights_for(n, 41);
      Script script = make_script(n.config.vocab_size, 7);
      for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
        RunOptions base;
        base.dtype = dtype;
        Logits expected = decoder_logits(*ref, w, script, base);
        const double limit = dtype == DType::f32 ? 1e-9 : dtype == DType::f16 ? 5e-3 : 3e-2;
        for (Kernels kernels : {Kernels::fused, Kernels::unfused}) {
          RunOptions o = base;
          o.kernels = kernels;
          expect_logits_close(expected, decoder_logits(*cuda, w, script, o), limit,
                              std::string(n.name) + ", " + dtype_name(dtype) + ", gemm " + gemm +
                                  ", " + kernels_name(kernels));
        }
      }
    }
  }
}

// A matrix of random f32 weights as type t: quantized (legacy types), or random K-quant blocks
// whose weights are about as large (nothing makes K-quants), with `f32` set to the weights it holds.
Tensor as_type(const Tensor& weights, DType t, std::mt19937& rng, Tensor* f32) {
  Tensor out = host_tensor(weights.shape(), t);
  if (is_k_quant(t)) {
    random_k_quant_blocks(out.data(), t, out.numel() / dtype_block(t), rng, 1.5e-4f);
  } else {
    out.convert_from(weights);
  }
  *f32 = host_tensor(weights.shape(), DType::f32);
  f32->convert_from(out);
  return out;
}

// A GGUF K-quant mix (Q4_K_M stores V in Q6_K beside Q and K in Q4_K) and every other type, mixed
// within the products minfer fuses (Q|K|V, gate|up): the CPU and reference backends run it in
// parts, and agree with the same weights dequantized to f32 (reference: exactly; CPU: its
// activations are rounded to 8 bits per block, so within the q8_0 fixtures' limit), fused and
// unfused alike.
struct MixedModel {
  LlamaConfig config;
  LlamaHostWeights mixed, dequantized;
};

MixedModel mixed_model() {
  MixedModel m{shape(256, 512, 2, 4, 2, 97, false), {}, {}};
  m.mixed = random_llama_weights(m.config, 61, 2.5);
  m.dequantized = m.mixed;
  std::mt19937 rng(7);
  auto set = [&](Tensor LlamaHostWeights::*table, DType t) {
    m.mixed.*table = as_type(m.mixed.*table, t, rng, &(m.dequantized.*table));
  };
  set(&LlamaHostWeights::token_embedding, DType::q4_k);
  set(&LlamaHostWeights::classifier, DType::q6_k);
  const DType types[2][7] = {{DType::q4_k, DType::q4_k, DType::q6_k, DType::q5_k, DType::q3_k, DType::q2_k, DType::q6_k},
                             {DType::q4_0, DType::q5_0, DType::q8_0, DType::q4_1, DType::q5_1, DType::q5_1, DType::f16}};
  for (size_t l = 0; l < 2; ++l) {
    LlamaHostWeights::Layer &q = m.mixed.layers[l], &d = m.dequantized.layers[l];
    Tensor* matrices[7] = {&q.wq, &q.wk, &q.wv, &q.wo, &q.w1, &q.w3, &q.w2};
    Tensor* wide[7] = {&d.wq, &d.wk, &d.wv, &d.wo, &d.w1, &d.w3, &d.w2};
    for (size_t i = 0; i < 7; ++i) *matrices[i] = as_type(*matrices[i], types[l][i], rng, wide[i]);
  }
  return m;
}

// A preset asked for in a K-quant mix (--dtype q4_k_m) allocates the types WeightTypes gives, and
// the byte counts the bench and the memory checks make from the config agree with the tensors'.
TEST(WholeModel, PresetsTakeTheKQuantMixes) {
  LlamaConfig c = find_preset("tiny").config;
  c.dim = 256, c.hidden_dim = 512, c.n_layers = 8, c.n_heads = 4, c.n_kv_heads = 2, c.vocab_size = 512;
  c.shared_classifier = false;  // embedding in the base type, classifier in q6_k; wv, w2 of layers 0, 3, 6, 7 in q6_k
  BackendOptions options;
  options.threads = 2;
  auto cpu = make_backend(BackendKind::cpu, options);
  for (const char* mix : {"q4_k_m", "q5_k_m"}) {
    SCOPED_TRACE(mix);
    LlamaOptions lo;
    lo.dtype = WeightTypes::parse(mix);
    LlamaModel model(*cpu, c, "mix", lo);
    const std::string base = dtype_name(lo.dtype->base);
    EXPECT_NE(model.info().weight_types.find(base), std::string::npos) << model.info().weight_types;
    EXPECT_NE(model.info().weight_types.find("q6_k"), std::string::npos) << model.info().weight_types;
    EXPECT_EQ(model.info().weight_types.find("f16"), std::string::npos) << model.info().weight_types;
    EXPECT_EQ(model.info().weight_bytes, LlamaModel::weight_bytes(c, *lo.dtype));
    EXPECT_EQ(decode_step_bytes(model.info(), c, DType::f32, 1, 3), decode_step_bytes(c, *lo.dtype, DType::f32, 1, 3));
    // It decodes: finite logits, not all equal.
    Decoder decoder(model, DecoderOptions{});
    decoder.prefill({{1, 2, 3}});
    const float* logits = decoder.logits(0);
    float least = logits[0], most = logits[0];
    for (int64_t v = 0; v < c.vocab_size; ++v) {
      ASSERT_TRUE(std::isfinite(logits[v])) << v;
      least = std::min(least, logits[v]);
      most = std::max(most, logits[v]);
    }
    EXPECT_LT(least, most);
  }
}

TEST(WholeModel, MixedQuantizedTypesMatchTheirWeightsInF32) {
  const MixedModel m = mixed_model();
  auto ref = make_backend(BackendKind::ref);
  BackendOptions options;
  options.threads = 2;
  auto cpu = make_backend(BackendKind::cpu, options);
  LlamaModel model(*cpu, m.mixed, "mixed", LlamaOptions{});
  EXPECT_NE(model.info().weight_types.find("q4_k"), std::string::npos) << model.info().weight_types;
  EXPECT_EQ(model.info().weight_bytes, LlamaModel::weight_bytes(m.mixed, std::nullopt));
  Script script = make_script(m.config.vocab_size, 9);
  RunOptions wide;
  const Logits expected = decoder_logits(*ref, m.dequantized, script, wide);
  RunOptions as_stored;
  as_stored.dtype = std::nullopt;
  for (Kernels kernels : {Kernels::fused, Kernels::unfused}) {
    as_stored.kernels = kernels;
    expect_logits_close(expected, decoder_logits(*ref, m.mixed, script, as_stored), 1e-10,
                        std::string("mixed types on ref, ") + kernels_name(kernels));
  }
  // (measured: 1.2e-3, from the activations' rounding alone)
  expect_cpu_variants_close(expected, *cpu, m.mixed, script, as_stored, 5e-3, "mixed types on cpu");
  // The limit is not loose: another model's logits are far outside it.
  EXPECT_GT(worst_nmse(expected, decoder_logits(*ref, random_llama_weights(m.config, 62, 2.5), script, wide)), 0.05);
}

// The same on CUDA: decode dequantizes in registers (exact weights, f32 sums), prefill rounds the
// weights and activations to f16 for cuBLASLt: the f16 limit of CudaBackendMatchesTheReferenceBackend.
TEST(WholeModel, MixedQuantizedTypesOnCudaMatchTheirWeightsInF32) {
  std::string reason;
  if (cuda_device_count(&reason) == 0) GTEST_SKIP() << "skipped: no CUDA device (" << reason << ")";
  const MixedModel m = mixed_model();
  auto ref = make_backend(BackendKind::ref);
  auto cuda = make_backend(BackendKind::cuda);
  Script script = make_script(m.config.vocab_size, 9);
  const Logits expected = decoder_logits(*ref, m.dequantized, script, RunOptions{});
  RunOptions as_stored;
  as_stored.dtype = std::nullopt;
  for (Kernels kernels : {Kernels::fused, Kernels::unfused}) {
    as_stored.kernels = kernels;
    expect_logits_close(expected, decoder_logits(*cuda, m.mixed, script, as_stored), 5e-3,
                        std::string("mixed types on cuda, ") + kernels_name(kernels));
  }
}

// run.c's way of feeding a prompt, a token per forward pass, against one batched pass.
TEST(WholeModel, OneByOnePrefillMatchesBatchedOnEveryBackend) {
  const Named& n = shapes()[1];
  LlamaHostWeights w = weights_for(n, 51);
  Script script = make_script(n.config.vocab_size, 8);
  for (auto& p : script.prompts) p.resize(6, 3);  // equal lengths
  Logits expected = naive_logits(w, script);
  for (BackendKind kind : {BackendKind::ref, BackendKind::cpu}) {
    auto backend = make_backend(kind);
    LlamaModel model(*backend, w, "random", LlamaOptions{});
    DecoderOptions dec;
    dec.n_seqs = 3;
    Decoder decoder(model, dec);
    GenerateOptions gen;
    gen.n_new = 1;
    gen.prefill_one_by_one = true;
    decoder.generate(script.prompts, gen);
    for (int64_t s = 0; s < 3; ++s) {
      const float* l = decoder.logits(s);
      EXPECT_LE(nmse(expected[0][s], std::vector<double>(l, l + n.config.vocab_size)), 1e-9)
          << backend_kind_name(kind) << ", sequence " << s;
    }
  }
}

// The presets' first greedy tokens are the same on --device ref and --device cpu. Random weights
// make near-ties possible, where f32 and double may rightly disagree: ids are compared up to the
// first step whose reference margin is below 1e-3, and the test requires at least 4 such steps.
TEST(WholeModel, PresetsGiveTheReferenceGreedyIdsOnTheCpu) {
  auto ref = make_backend(BackendKind::ref);
  auto cpu = make_backend(BackendKind::cpu);
  for (const char* spec : {"preset:tiny", "preset:stories15M"}) {
    GreedyRun expected = greedy_run(*ref, spec, LlamaOptions{}, {1, 450, 200, 31}, 6);
    GreedyRun got = greedy_run(*cpu, spec, LlamaOptions{}, {1, 450, 200, 31}, 6);
    EXPECT_GE(expect_same_ids_where_decisive(expected, got, 1e-3, spec), 4u)
        << spec << ": the reference has near-ties too early to compare";
  }
}

// Synthetic weights with Qwen's and Gemma's features (presets qwen2.5-0.5b, qwen3-0.6b, gemma3-270m)
// fill the q, k and v biases, the q and k norms and the post norms: the same seed without them
// gives other logits, the CPU backend
// agrees with the reference on them, and the bytes counted from the config are the tensors'.
TEST(WholeModel, SyntheticFamilyWeightsAreFilledAndAgreeAcrossBackends) {
  auto ref = make_backend(BackendKind::ref);
  auto cpu = make_backend(BackendKind::cpu);
  auto logits_of = [](Backend& backend, const LlamaConfig& c) {
    LlamaModel model(backend, c, "synthetic", LlamaOptions{});
    EXPECT_EQ(model.info().weight_bytes, LlamaModel::weight_bytes(c, DType::f32));
    EXPECT_EQ(decode_step_bytes(model.info(), c, DType::f32, 1, 3), decode_step_bytes(c, DType::f32, DType::f32, 1, 3));
    Decoder decoder(model, DecoderOptions{});
    decoder.prefill({{1, 45, 20, 31}});
    return std::vector<double>(decoder.logits(0), decoder.logits(0) + c.vocab_size);
  };
  for (const LlamaConfig& with : {qwen2_like(shape(64, 160, 2, 4, 2, 91, true)),
                                  qwen3_like(shape(64, 160, 2, 4, 2, 91, true)),
                                  gemma3_like(shape(64, 160, 3, 4, 1, 91, true)),
                                  qwen2_moe_like(shape(64, 96, 2, 4, 2, 91, true))}) {
    SCOPED_TRACE(with.describe());
    LlamaConfig without = with;
    without.qkv_bias = without.qk_norm = without.post_norms = false;
    const std::vector<double> expected = logits_of(*ref, with);
    EXPECT_LE(nmse(expected, logits_of(*cpu, with)), 1e-10);
    EXPECT_GT(nmse(expected, logits_of(*ref, without)), 1e-6) << "the biases or norms change nothing";
  }
}

// Quantized experts, packed at load by the CPU backend (each expert's matrix on its own), against
// the reference backend on the same quantized weights. The CPU's integer products round the
// activations to 8 bits. The shapes' weights of gain 2.5 amplify that where a row's k-th and
// (k + 1)-th experts are near a tie (on the reference alone, q8_0 weights move their logits by 1e-2
// to 0.16 of f32's, the dense shapes' by 1e-3), so these take gain 1: measured up to 1.5e-4, limit
// 1e-3, and another model's logits are far outside it.
TEST(WholeModel, QuantizedExpertsOnTheCpuMatchTheReference) {
  auto ref = make_backend(BackendKind::ref);
  BackendOptions options;
  options.threads = 2;
  auto cpu = make_backend(BackendKind::cpu, options);
  for (const Named& n : shapes()) {
    if (n.config.n_experts == 0) continue;
    LlamaHostWeights w = random_llama_weights(n.config, 41, 1.0);
    w.rotate_half = n.rotate_half;
    const Script script = make_script(n.config.vocab_size, 7);
    for (DType dtype : {DType::q8_0, DType::q4_0, DType::q4_k}) {
      RunOptions o;
      o.dtype = dtype;
      LlamaOptions lo;
      lo.dtype = dtype;
      EXPECT_NE(LlamaModel(*cpu, w, "random", lo).weight_layout(), "") << n.name << ": no matrix packed";
      const Logits expected = decoder_logits(*ref, w, script, o);
      expect_cpu_variants_close(expected, *cpu, w, script, o, 1e-3, std::string(n.name) + ", " + dtype_name(dtype));
      EXPECT_GT(worst_nmse(expected, decoder_logits(*ref, random_llama_weights(n.config, 42, 1.0), script, o)), 0.05)
          << n.name;
    }
  }
}

// The rule itself: a difference after a near-tie is not a failure, one before it is.
TEST(WholeModel, IdsAreComparedOnlyWhereTheReferenceIsDecisive) {
  GreedyRun reference{{5, 6, 7, 8}, {0.5, 0.2, 1e-5, 0.9}, {}};
  GreedyRun diverged{{5, 6, 9, 9}, {}, {}};
  EXPECT_EQ(expect_same_ids_where_decisive(reference, diverged, 1e-3, "after a tie"), 2u);
  GreedyRun wrong{{5, 4, 7, 8}, {}, {}};
  EXPECT_NONFATAL_FAILURE(expect_same_ids_where_decisive(reference, wrong, 1e-3, "decisive"), "step 1");
}

}  // namespace
}  // namespace minfer::test

namespace minfer::test {
namespace {

// The experts a pass reads, counted: one row reads exactly k of each layer of experts' E (the
// qwen3-moe-like shape's 2 layers of experts: its middle layer is dense), a prompt of 12 rows at
// least k and at most E a layer, and the bytes are the count times an expert's three matrices; the
// rows and the uniform router's prediction for them are kept beside.
TEST(WholeModel, ExpertReadsAreCountedPerPass) {
  auto cpu = make_backend(BackendKind::cpu);
  const Named& n = shapes()[8];
  ASSERT_EQ(n.config.n_experts, 8) << n.name;
  const LlamaHostWeights w = weights_for(n, 43);
  LlamaModel model(*cpu, w, "random", LlamaOptions{});
  DecoderOptions dec;
  dec.n_seqs = 1;
  Decoder decoder(model, dec);
  model.count_expert_reads(true);
  decoder.prefill({{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}});
  const LlamaModel::ExpertReads prompt = model.expert_reads();
  EXPECT_EQ(prompt.passes, 1u);
  EXPECT_EQ(prompt.rows, 12u);
  EXPECT_DOUBLE_EQ(prompt.predicted_experts, 2 * n.config.expected_experts_read(12));
  EXPECT_GE(prompt.experts, 2u * 3u);
  EXPECT_LE(prompt.experts, 2u * 8u);
  EXPECT_GT(prompt.experts, 2u * 3u) << "12 rows all chose the same 3 experts in both layers";
  const uint64_t expert_bytes = 3 * uint64_t(n.config.expert_hidden_dim) * uint64_t(n.config.dim) * 4;  // f32
  EXPECT_EQ(prompt.bytes, prompt.experts * expert_bytes);
  model.count_expert_reads(true);  // from zero again
  for (int32_t t : {7, 11, 13}) decoder.decode({t});
  EXPECT_EQ(model.expert_reads().passes, 3u);
  EXPECT_EQ(model.expert_reads().experts, 3u * 2u * 3u);
  EXPECT_EQ(model.info().expert_bytes, 2 * expert_bytes);
  auto ref = make_backend(BackendKind::ref);
  LlamaModel on_ref(*ref, w, "random", LlamaOptions{});
  EXPECT_NO_THROW(on_ref.count_expert_reads(true));
}

}  // namespace
}  // namespace minfer::test
