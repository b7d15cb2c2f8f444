// The bench's bookkeeping against hand counts for preset:tiny (dim 64, hidden 172, 5 layers,
// 8 heads, 4 KV heads, head_dim 8, kv_dim 32, vocab 512, shared classifier).
#include <gtest/gtest.h>

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
