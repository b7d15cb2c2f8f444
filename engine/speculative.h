// Speculative decoding: several tokens of one sequence per pass over the target model's weights.
//
// A decode step reads every weight to produce one token, and on a memory-bound machine a pass
// over k + 1 rows of the same sequence costs little more than a pass over one (the weights are
// read once either way). Speculative decoding spends that idle capacity on the sequence's own
// future: a cheap drafter guesses k tokens d1 .. dk after the last token x, and the target runs
// x, d1, .., dk as k + 1 rows of one forward pass, which gives its next-token logits after each
// of them. Where the target agrees with a guess, that token is accepted and the logits after it
// are already there to check the next; at the first disagreement the target's own choice is
// taken instead. Every round yields between 1 (no guess accepted: a plain decode step, paid a
// little more) and k + 1 tokens (every guess accepted, plus the target's token after the last).
//
//   round:  drafter   x -> d1 -> d2 -> d3                      (k = 3 cheap steps, or a lookup)
//           target    [x d1 d2 d3] in one pass -> g0 g1 g2 g3  (its choice after each row)
//           accept    d1 == g0, d2 == g1, d3 != g2  ->  emit d1 d2 g2; the cache keeps x d1 d2
//
// The rejected rows' keys and values stay in the cache but past the sequence's position:
// Decoder::rewind moves the position back and the next pass overwrites them (nothing copied).
//
// Exactness. Greedy: a token is emitted only where it is the target's argmax given everything
// before it, so the output is the target's greedy output, id for id, whatever the drafter.
// note: "the target's argmax" as the verify pass computes it. The matrix products choose their
// kernel by the number of rows (kernels/cpu/matmul.cpp: one row, 2-7, 8 and more for f32), and
// kernels that sum in another order can round the last bit of a logit differently, so a near-tie
// that plain decoding (one row per sequence) breaks one way could break the other way in a pass of
// k + 1 rows; llama.cpp's speculative decoding has the same property. No prompt tested here
// (random models, stories260K, SmolLM2-135M, k = 1 to 8, batches) has met one.
// Sampled: the rule of Leviathan et al. (2023) and Chen et al. (2023), accept_or_resample()
// below, makes each emitted token distributed as the target's distribution p, whatever the
// drafter's q: accept the drafted d with probability min(1, p(d) / q(d)); on a rejection draw
// from max(0, p - q) renormalised. (Summed over both ways a token t comes out:
// q(t) min(1, p(t)/q(t)) + (1 - sum_u min(p(u), q(u))) (p(t) - q(t))+ / sum_u (p(u) - q(u))+
// = min(p(t), q(t)) + (p(t) - q(t))+ = p(t).) The tokens differ from a plain run's with the same
// seed, as the coins are used differently; the distribution is the same.
//
// The speed-up. With acceptance rate a per drafted token (independent, as Leviathan's analysis
// assumes), a round of k drafts yields (1 - a^(k+1)) / (1 - a) tokens on average, and costs
// k drafter steps plus one verify pass: with c the cost of a drafter step and v that of a verify
// pass of k + 1 rows, both relative to a plain decode step,
//     speed-up = (1 - a^(k+1)) / ((1 - a) (k c + v)).
// expected_speedup() is that formula; `minfer demo speculative` sets it beside the measurement.
//
// Drafters: a draft model (a smaller model, or the target itself in a cheaper dtype: q8_0 or
// q4_0 weights of an f32 target, self-speculation by quantization) with its own decoder and KV
// cache; or prompt lookup, which copies what followed the last few tokens earlier in the context
// and costs nothing, winning where the output repeats its input (summaries, code edits). A lookup
// guess on free text is mostly wrong, and each wrong row costs a little, so prompt lookup knows
// when not to draft: a sequence drafts at most as many tokens as its last round accepted plus
// one, and twice as many after a round that accepted everything (up to k); no match, no draft.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/decoder.h"

namespace minfer {

// Prompt lookup: the last m tokens of context (m from ngram down to min_match) looked for earlier
// in the context, the most recent occurrence of the longest that occurs; up to k of the tokens
// that followed it are written to `draft`. Returns how many (0: no match, draft nothing).
int64_t lookup_draft(const int32_t* context, int64_t n, int64_t ngram, int64_t min_match, int64_t k, int32_t* draft);

// The verdict on one drafted token. `p` (n) is the target's distribution, `q` (n) the
// drafter's, or nullptr for a drafter that proposes `token` with certainty (prompt lookup).
// Accepted when accept_coin < p[token] / q[token]; otherwise `token` is the replacement drawn
// with resample_coin from max(0, p - q) normalised, which is written over p. Coins are in [0, 1).
struct Verdict {
  bool accepted;
  int32_t token;
};
Verdict accept_or_resample(float* p, const float* q, int64_t n, int32_t token, float accept_coin,
                           float resample_coin);

// Leviathan's expected speed-up (above) for acceptance rate a, k drafts per round, drafter step
// cost c and verify pass cost v relative to a plain decode step.
double expected_speedup(double a, int64_t k, double c, double v);

struct SpeculativeOptions {
  int64_t k = 4;          // tokens drafted per round, at most
  int64_t ngram = 3;      // prompt lookup: the longest suffix looked up
  int64_t min_match = 1;  // prompt lookup: the shortest suffix whose match is drafted from
};

// The options of a draft model's decoder beside a target decoder made with `target`: the same
// sequences and context, one logits row per sequence, and room for the two rows per sequence a
// round's first draft step may feed; the KV cache in the draft's default type.
DecoderOptions draft_decoder_options(const DecoderOptions& target);

// Generation with a drafter. `target` verifies (made with logits_per_seq >= k + 1); `draft` is
// the draft model's decoder over the same sequences and vocabulary, or nullptr for prompt lookup.
// Both decoders belong to the caller and must outlive this object.
class SpeculativeDecoder {
 public:
  SpeculativeDecoder(Decoder& target, Decoder* draft, const SpeculativeOptions& options);

  // As Decoder::generate, with speculation: the same prompts, options and callbacks; the result's
  // decode_steps are target passes after the prefill, draft_passes the drafter's, drafted and
  // accepted the guesses made and taken. Greedy output equals Decoder::generate's.
  GenerateResult generate(const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& options,
                          const std::function<void(int64_t, int32_t)>& on_token = nullptr);

 private:
  struct Sequence {
    std::vector<int32_t> context;  // the prompt and every emitted token
    std::vector<int32_t> rows;     // the verify pass's rows: the last token, then the drafts
    std::vector<float> q;          // (k, vocab) the draft model's distributions when sampling
    int64_t n_draft = 0;           // drafts in rows[1 ..]
    int64_t budget = 0;            // drafts this round may hold
    int64_t lookup_limit = 0;      // prompt lookup: drafts the last round earned (see above)
    int64_t emitted = 0;
    bool done = false;
  };
  void start(const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& options);
  void emit(int64_t s, int32_t token, GenerateResult* result);
  void draft_by_lookup();
  void draft_with_model(GenerateResult* result);
  void verify(GenerateResult* result);
  int32_t verify_sequence(Sequence& seq, int64_t s, int64_t first_row, int64_t* accepted);

  Decoder& target_;
  Decoder* draft_;
  SpeculativeOptions options_;
  int64_t vocab_;
  GenerateOptions gen_;
  bool greedy_ = true;
  std::function<void(int64_t, int32_t)> on_token_;
  std::vector<Sequence> seqs_;
  std::vector<Sampler> target_samplers_, draft_samplers_;
  std::vector<Decoder::Chunk> chunks_;
  std::vector<int64_t> chunk_seq_;
  std::vector<int32_t> ids_;
};

}  // namespace minfer
