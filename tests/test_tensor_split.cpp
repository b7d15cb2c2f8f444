// The tensor-parallel split (model/tensor_split.h): each dimension covered once in rank order, cuts
// on the row-parallel matrices' blocks, a shard's query heads paired with the right KV heads, the
// real models' shapes, and one-line refusals exactly where a rank would get nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/tensor_split.h"
#include "tests/test_support.h"

namespace minfer {
namespace {

LlamaConfig shape(int64_t dim, int64_t heads, int64_t kv_heads, int64_t head_size, int64_t hidden, int64_t vocab) {
  LlamaConfig c;
  c.dim = dim;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_size = head_size;
  c.hidden_dim = hidden;
  c.vocab_size = vocab;
  c.n_layers = 2;
  c.n_ctx = 64;
  c.validate("test");
  return c;
}

std::vector<TensorSplit> all_ranks(const LlamaConfig& c, const SplitGrain& grain, int ranks) {
  std::vector<TensorSplit> out;
  for (int r = 0; r < std::max(ranks, 1); ++r) out.push_back(split_for_rank(c, grain, r, ranks));
  return out;
}

// The one-line refusal of a split, or "(no error)".
std::string refusal(const LlamaConfig& c, const SplitGrain& grain, int ranks) {
  return test::error_of([&] { all_ranks(c, grain, ranks); });
}

// Ranges of consecutive ranks that tile [0, n) without a gap or an overlap, each cut (but the
// last, the dimension's end) on a multiple of `grain`.
void expect_tiles(const std::vector<IndexRange>& parts, int64_t n, int64_t grain, const char* what) {
  int64_t next = 0;
  for (size_t r = 0; r < parts.size(); ++r) {
    EXPECT_EQ(parts[r].begin, next) << what << ", rank " << r;
    EXPECT_GT(parts[r].size(), 0) << what << ", rank " << r;
    if (parts[r].end != n) {
      EXPECT_EQ(parts[r].end % grain, 0) << what << ", rank " << r;
    }
    next = parts[r].end;
  }
  EXPECT_EQ(next, n) << what;
}

TEST(TensorSplit, OneRankHoldsEverything) {
  const LlamaConfig c = shape(576, 9, 3, 64, 1536, 49152);
  const TensorSplit s = split_for_rank(c, {}, 0, 1);
  EXPECT_EQ(s.q_heads, (IndexRange{0, 9}));
  EXPECT_EQ(s.kv_heads, (IndexRange{0, 3}));
  EXPECT_EQ(s.ffn, (IndexRange{0, 1536}));
  EXPECT_EQ(s.vocab, (IndexRange{0, 49152}));
}

// SmolLM2-135M (Q4_1: blocks of 32): 3 KV groups of 3 heads go 2 + 1.
TEST(TensorSplit, SmolLM2OverTwoRanksSplitsItsThreeKvHeadsTwoAndOne) {
  const LlamaConfig c = shape(576, 9, 3, 64, 1536, 49152);
  const auto s = all_ranks(c, {32, 32, 1}, 2);
  EXPECT_EQ(s[0].kv_heads, (IndexRange{0, 2}));
  EXPECT_EQ(s[1].kv_heads, (IndexRange{2, 3}));
  EXPECT_EQ(s[0].q_heads, (IndexRange{0, 6}));
  EXPECT_EQ(s[1].q_heads, (IndexRange{6, 9}));
  EXPECT_EQ(s[0].ffn, (IndexRange{0, 768}));
  EXPECT_EQ(s[1].vocab, (IndexRange{24576, 49152}));
  EXPECT_EQ(s[1].describe(c), "rank 1 of 2: heads 7-9 of 9, KV heads 3-3 of 3, hidden 769-1536 of 1536, "
                              "vocabulary 24577-49152 of 49152");
}

// Qwen2.5-1.5B's feed-forward of 8960 in Q4_K blocks of 256 is 35 blocks: 18 + 17; Qwen2.5-Coder-
// 0.5B's 4864 is 19: 10 + 9.
TEST(TensorSplit, AFeedForwardOf35BlocksGoes18And17) {
  const LlamaConfig c = shape(1536, 12, 2, 128, 8960, 151936);
  const auto s = all_ranks(c, {256, 256, 1}, 2);
  EXPECT_EQ(s[0].ffn, (IndexRange{0, 18 * 256}));
  EXPECT_EQ(s[1].ffn, (IndexRange{18 * 256, 8960}));
  EXPECT_EQ(s[0].q_heads, (IndexRange{0, 6}));
  EXPECT_EQ(s[1].kv_heads, (IndexRange{1, 2}));
  const auto coder = all_ranks(shape(896, 14, 2, 64, 4864, 151936), {32, 256, 1}, 2);
  EXPECT_EQ(coder[0].ffn, (IndexRange{0, 10 * 256}));
  EXPECT_EQ(coder[1].ffn, (IndexRange{10 * 256, 4864}));
  EXPECT_EQ(coder[0].q_heads, (IndexRange{0, 7}));
}

// Gemma 3 270M: one KV head, replicated on both ranks, its 4 query heads shared 2 + 2.
TEST(TensorSplit, OneKvHeadIsReplicatedAndItsQueryHeadsShared) {
  const LlamaConfig c = shape(640, 4, 1, 256, 2048, 262144);
  const auto s = all_ranks(c, {256, 256, 1}, 2);
  for (const TensorSplit& r : s) EXPECT_EQ(r.kv_heads, (IndexRange{0, 1}));
  EXPECT_EQ(s[0].q_heads, (IndexRange{0, 2}));
  EXPECT_EQ(s[1].q_heads, (IndexRange{2, 4}));
}

// A unit of heads is as many KV groups as fill whole blocks of wo's columns: groups of 64 columns
// with blocks of 256 go four at a time, so 8 KV heads are 2 units.
TEST(TensorSplit, HeadsGoInUnitsThatFillWoBlocks) {
  const LlamaConfig c = shape(512, 8, 8, 64, 512, 100);
  const auto two = all_ranks(c, {256, 1, 1}, 2);
  EXPECT_EQ(two[0].q_heads, (IndexRange{0, 4}));
  EXPECT_EQ(two[1].q_heads, (IndexRange{4, 8}));
  EXPECT_EQ(refusal(c, {256, 1, 1}, 3),
            "tensor parallel over 3 ranks: the 8 KV heads in units of 4 are 2 units, which leaves rank 2 nothing");
  EXPECT_EQ(refusal(c, {32, 1, 1}, 8), "(no error)");  // at the limit: one head each
}

// The boundaries of each refusal: exactly as many units as ranks is allowed, one rank more is not.
TEST(TensorSplit, ASplitThatLeavesARankNothingIsRefusedInOneLine) {
  const LlamaConfig ffn = shape(256, 4, 4, 64, 768, 100);  // 3 blocks of 256
  EXPECT_EQ(refusal(ffn, {1, 256, 1}, 3), "(no error)");
  EXPECT_EQ(refusal(ffn, {1, 256, 1}, 4),
            "tensor parallel over 4 ranks: the feed-forward's 768 hidden units in units of 256 are 3 units, "
            "which leaves rank 3 nothing");
  const LlamaConfig kv = shape(256, 4, 2, 64, 512, 100);
  EXPECT_EQ(refusal(kv, {}, 4), "(no error)");  // each KV head on 2 ranks, 2 query heads each
  EXPECT_EQ(refusal(kv, {}, 3), "tensor parallel over 3 ranks: more ranks than the 2 KV heads, and not a multiple of them");
  EXPECT_EQ(refusal(shape(480, 6, 2, 80, 512, 100), {32, 1, 1}, 4),  // 3 heads of 80: 240 columns
            "tensor parallel over 4 ranks: a KV head's 240 columns of wo are not whole blocks of 32");
  EXPECT_EQ(refusal(kv, {}, 8),
            "tensor parallel over 8 ranks: a KV head's 2 query heads in units of 1 are 2 units, which leaves "
            "rank 2 nothing");
  const LlamaConfig vocab = shape(256, 4, 4, 64, 512, 3);
  EXPECT_EQ(refusal(vocab, {}, 4),
            "tensor parallel over 4 ranks: the vocabulary's 3 tokens in units of 1 are 3 units, which leaves rank 3 "
            "nothing");
  EXPECT_NE(refusal(vocab, {}, 0).find("0 ranks (1 to 1024)"), std::string::npos);
  EXPECT_NE(refusal(vocab, {}, TensorSplit::kMaxRanks + 1).find("1025 ranks"), std::string::npos);
}

// Every shape and rank count that splits: each dimension tiled in rank order on its grain, every
// query head of a shard paired by the kernels' grouping (head i reads KV head i / (heads /
// kv_heads) of the shard) with the KV head it reads in the whole model, and a shard config that
// validates.
TEST(TensorSplit, EveryShardCoversItsPartAndPairsHeadsRight) {
  struct Case {
    int64_t heads, kv, hd, hidden;
    SplitGrain grain;
  };
  const std::vector<Case> cases = {{9, 3, 64, 1536, {32, 32, 1}},   {14, 2, 64, 4864, {32, 256, 1}},
                                   {4, 1, 256, 2048, {256, 256, 1}}, {32, 8, 128, 14336, {256, 256, 1}},
                                   {12, 4, 80, 3000, {32, 8, 1}},    {6, 6, 48, 100, {16, 4, 1}}};
  int splits = 0;
  for (const Case& k : cases) {
    const LlamaConfig c = shape(k.heads * k.hd, k.heads, k.kv, k.hd, k.hidden, 1000);
    const int64_t g = c.n_heads / c.n_kv_heads;
    for (int ranks = 1; ranks <= 16; ++ranks) {
      std::vector<TensorSplit> s;
      try {
        s = all_ranks(c, k.grain, ranks);
      } catch (const Error&) {
        continue;
      }
      ++splits;
      std::vector<IndexRange> q, ffn, vocab;
      for (const TensorSplit& r : s) {
        q.push_back(r.q_heads);
        ffn.push_back(r.ffn);
        vocab.push_back(r.vocab);
        const LlamaConfig shard = r.shard_config(c);
        EXPECT_NO_THROW(shard.validate("shard"));
        EXPECT_EQ(shard.head_dim(), c.head_dim());
        const int64_t local_g = shard.n_heads / shard.n_kv_heads;
        for (int64_t i = 0; i < shard.n_heads; ++i)
          EXPECT_EQ(r.kv_heads.begin + i / local_g, (r.q_heads.begin + i) / g)
              << "heads " << k.heads << "/" << k.kv << ", " << ranks << " ranks, rank " << r.rank << ", head " << i;
        if (r.q_heads.end != c.n_heads) {
          EXPECT_EQ(r.q_heads.end * c.head_dim() % k.grain.attention_columns, 0);
        }
      }
      expect_tiles(q, c.n_heads, 1, "query heads");
      expect_tiles(ffn, c.hidden_dim, k.grain.ffn_columns, "hidden units");
      expect_tiles(vocab, c.vocab_size, 1, "vocabulary");
    }
  }
  EXPECT_GE(splits, 30);  // 34 of the 96 pairs of shape and rank count split
}

// A mixture of experts splits each expert's hidden units and the shared expert's on their w2
// blocks; with every layer a layer of experts the unused dense width is not split.
TEST(TensorSplit, ExpertsSplitTheirHiddenUnits) {
  LlamaConfig c = shape(256, 4, 2, 64, 512, 100);
  c.n_experts = 8;
  c.n_experts_used = 2;
  c.expert_hidden_dim = 96;
  c.shared_expert_hidden_dim = 768;
  c.validate("test");
  const auto s = all_ranks(c, {1, 256, 32}, 2);
  EXPECT_EQ(s[0].expert_hidden, (IndexRange{0, 64}));
  EXPECT_EQ(s[1].expert_hidden, (IndexRange{64, 96}));
  EXPECT_EQ(s[1].shared_ffn, (IndexRange{512, 768}));
  EXPECT_EQ(s[0].ffn.size(), 0);
  const LlamaConfig shard = s[1].shard_config(c);
  EXPECT_EQ(shard.expert_hidden_dim, 32);
  EXPECT_EQ(shard.shared_expert_hidden_dim, 256);  // 3 blocks: 2 + 1
  EXPECT_EQ(shard.hidden_dim, 512);
  EXPECT_EQ(refusal(c, {1, 256, 32}, 4),
            "tensor parallel over 4 ranks: an expert's 96 hidden units in units of 32 are 3 units, which leaves "
            "rank 3 nothing");
}

}  // namespace
}  // namespace minfer
