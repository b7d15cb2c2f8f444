// The bench's bookkeeping against hand counts for preset:tiny (dim 64, hidden 172, 5 layers,
// 8 heads, 4 KV heads, head_dim 8, kv_dim 32, vocab 512, shared classifier).
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <vector>

#include "core/error.h"
#include "model/llama_cost.h"
#include "model/presets.h"

namespace minfer {
namespace {

LlamaConfig tiny() { return find_preset("tiny").config; }

TEST(BenchMath, MatrixParameters) {
  // per layer: wq, wo 64 x 64; wk, wv 32 x 64; w1, w3 172 x 64; w2 64 x 172
  const uint64_t per_layer = 2 * 64 * 64 + 2 * 32 * 64 + 3 * 172 * 64;
  EXPECT_EQ(per_layer, 45312u);
  EXPECT_EQ(layer_matrix_params(tiny()), 5 * per_layer);
  EXPECT_EQ(tiny().n_matmul_params(), 5 * per_layer + 512 * 64);  // + the classifier
}

TEST(BenchMath, DecodeStepBytes) {
  const uint64_t matrices = (226560 + 32768) * 4;  // every matrix once, f32
  const uint64_t norms = (2 * 5 + 1) * 64 * 4;
  const uint64_t embedding_row = 64 * 4;
  const uint64_t kv_per_position = 2 * 5 * 32 * 4;  // keys and values, every layer
  EXPECT_EQ(decode_step_bytes(tiny(), DType::f32, DType::f32, 1, 0), matrices + norms + embedding_row + kv_per_position);
  // B = 4 at position 9: the matrices once, 4 embedding rows, 4 x 10 positions of cache.
  EXPECT_EQ(decode_step_bytes(tiny(), DType::f32, DType::f32, 4, 9),
            matrices + norms + 4 * embedding_row + 4 * 10 * kv_per_position);
  // bf16 weights halve the matrices and the embedding rows, not the f32 norms or cache.
  EXPECT_EQ(decode_step_bytes(tiny(), DType::bf16, DType::f32, 1, 0),
            matrices / 2 + norms + embedding_row / 2 + kv_per_position);
}

TEST(WeightTypes, ParseAndName) {
  for (const char* name : {"q4_k_m", "q5_k_m", "q8_0", "q4_k", "f32"}) {
    const std::optional<WeightTypes> t = WeightTypes::parse(name);
    ASSERT_TRUE(t) << name;
    EXPECT_EQ(t->name(), name);
  }
  EXPECT_EQ(WeightTypes::parse("q4_k_m")->base, DType::q4_k);
  EXPECT_TRUE(WeightTypes::parse("q5_k_m")->is_k_mix());
  EXPECT_FALSE(WeightTypes::parse("q4_k")->is_k_mix());
  EXPECT_THROW(WeightTypes::k_mix_of(DType::q8_0), Error);
  for (const char* name : {"q4_k_s", "q6_k_m", "q4_k_mm", "", "Q4_K_M"}) EXPECT_FALSE(WeightTypes::parse(name)) << name;
}

// What llama-quantize wrote for stories110M's shape (12 layers, tied classifier; the files of
// bench/results/cpu-zen4/gguf-quants.md): Q6_K for token_embd and for attn_v and ffn_down of
// layers 0, 3, 6, 9, 10 and 11 (13 tensors), Q4_K for the other 72 matrices.
TEST(WeightTypes, TheMixesFollowLlamaQuantizeOnStories110M) {
  const LlamaConfig c = find_preset("stories110M").config;
  ASSERT_EQ(c.n_layers, 12);
  ASSERT_TRUE(c.shared_classifier);
  for (const char* mix : {"q4_k_m", "q5_k_m"}) {
    const WeightTypes t = *WeightTypes::parse(mix);
    EXPECT_EQ(t.of(WeightRole::classifier, 0, 12, c.dim), DType::q6_k) << mix;
    EXPECT_EQ(t.of(WeightRole::embedding, 0, 12, c.dim), t.base) << mix;
    std::vector<int64_t> more_bits;
    for (int64_t l = 0; l < 12; ++l) {
      for (WeightRole role : {WeightRole::wq, WeightRole::wk, WeightRole::wo, WeightRole::w1, WeightRole::w3})
        EXPECT_EQ(t.of(role, l, 12, c.dim), t.base) << mix << " layer " << l;
      const DType v = t.of(WeightRole::wv, l, 12, c.dim), down = t.of(WeightRole::w2, l, 12, c.hidden_dim);
      EXPECT_EQ(v, down) << mix << " layer " << l;
      if (v == DType::q6_k) more_bits.push_back(l);
    }
    EXPECT_EQ(more_bits, (std::vector<int64_t>{0, 3, 6, 9, 10, 11})) << mix;
    // A width that is not whole blocks of 256 falls back as llama-quantize falls back (matrix_dtype):
    // SmolLM2's Q4_K_M file holds Q5_0 and Q8_0 matrices 576 wide; rows not of 32 take f16.
    EXPECT_EQ(t.of(WeightRole::wv, 0, 12, 576), DType::q8_0) << mix;
    EXPECT_EQ(t.of(WeightRole::classifier, 0, 12, 576), DType::q8_0) << mix;
    EXPECT_EQ(t.of(WeightRole::wq, 0, 12, 576), t.base == DType::q4_k ? DType::q5_0 : DType::q5_1) << mix;
    EXPECT_EQ(t.of(WeightRole::wq, 0, 12, 172), DType::f16) << mix;
  }
  // One type for all is the type everywhere.
  EXPECT_EQ(WeightTypes(DType::q4_k).of(WeightRole::classifier, 0, 12, c.dim), DType::q4_k);
  // Bytes: 72 matrices' weights in Q4_K and 13 tensors' in Q6_K, against one type for all.
  const uint64_t mixed = c.layer_matrix_bytes(*WeightTypes::parse("q4_k_m"));
  const uint64_t q4 = c.layer_matrix_bytes(DType::q4_k), q6 = c.layer_matrix_bytes(DType::q6_k);
  const uint64_t v_and_down = 6 * (uint64_t(c.kv_dim()) * uint64_t(c.dim) + uint64_t(c.dim) * uint64_t(c.hidden_dim));
  EXPECT_EQ(mixed, q4 + dtype_bytes(DType::q6_k, v_and_down) - dtype_bytes(DType::q4_k, v_and_down));
  EXPECT_LT(mixed, q6);
}

// SmolLM2-135M's shape (576 wide, hidden 1536, 30 layers, tied): llama-quantize's Q4_K_M file holds
// Q5_0 166, Q4_K 16, Q8_0 15 and Q6_K 14 tensors (bench/results/cpu-zen4/gguf-quants.md), its K-quants
// falling back where rows are not whole super-blocks.
TEST(WeightTypes, TheQ4KMMixFollowsLlamaQuantizeOnSmolLM2) {
  const WeightTypes t = *WeightTypes::parse("q4_k_m");
  const int64_t n = 30, d = 576, h = 1536;
  std::map<DType, int> count;
  ++count[t.of(WeightRole::classifier, 0, n, d)];  // the tied token_embd
  for (int64_t l = 0; l < n; ++l) {
    for (WeightRole role : {WeightRole::wq, WeightRole::wk, WeightRole::wv, WeightRole::wo, WeightRole::w1, WeightRole::w3})
      ++count[t.of(role, l, n, d)];
    ++count[t.of(WeightRole::w2, l, n, h)];
  }
  EXPECT_EQ(count, (std::map<DType, int>{{DType::q5_0, 166}, {DType::q4_k, 16}, {DType::q8_0, 15}, {DType::q6_k, 14}}));
}

TEST(BenchMath, Flops) {
  // One row at position 0: 2 FLOPs per matrix weight, the classifier, and attention over one key:
  // 4 x layers x dim x 1.
  EXPECT_EQ(decode_step_flops(tiny(), 1, 0), 2u * 226560 + 2u * 32768 + 4u * 5 * 64);
  EXPECT_EQ(decode_step_flops(tiny(), 3, 7), 3 * (2u * 226560 + 2u * 32768 + 4u * 5 * 64 * 8));
  // Prefill of 2 prompts of 3 tokens: 3 rows of matrices, attention over 1 + 2 + 3 keys, and the
  // classifier for the last row only, per prompt.
  EXPECT_EQ(prefill_flops(tiny(), 2, 3), 2 * (2u * 226560 * 3 + 4u * 5 * 64 * 6 + 2u * 32768));
}

}  // namespace
}  // namespace minfer
