#include "engine/speculative.h"

#include <algorithm>
#include <cmath>

#include "core/clock.h"
#include "core/error.h"

namespace minfer {

int64_t lookup_draft(const int32_t* context, int64_t n, int64_t ngram, int64_t min_match, int64_t k, int32_t* draft) {
  for (int64_t m = std::min(ngram, n - 1); m >= std::max<int64_t>(min_match, 1); --m) {
    const int32_t* suffix = context + n - m;
    // The most recent earlier occurrence: the start j runs back from the one just before the suffix.
    for (int64_t j = n - m - 1; j >= 0; --j) {
      if (!std::equal(suffix, suffix + m, context + j)) continue;
      const int64_t count = std::min(k, n - (j + m));
      std::copy(context + j + m, context + j + m + count, draft);
      return count;
    }
  }
  return 0;
}

Verdict accept_or_resample(float* p, const float* q, int64_t n, int32_t token, float accept_coin,
                           float resample_coin) {
  const float q_token = q ? q[token] : 1.0f;
  if (accept_coin * q_token < p[token]) return {true, token};  // coin < p / q, without dividing by 0
  float total = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float qi = q ? q[i] : (i == token ? 1.0f : 0.0f);
    p[i] = std::max(p[i] - qi, 0.0f);
    total += p[i];
  }
  // p <= q everywhere means p == q (both sum to 1), where the coin accepts: only rounding gets here.
  if (!(total > 0.0f)) return {true, token};
  return {false, sample_mult(p, n, resample_coin * total)};
}

double expected_speedup(double a, int64_t k, double c, double v) {
  const double tokens = a >= 1.0 ? double(k + 1) : (1.0 - std::pow(a, double(k + 1))) / (1.0 - a);
  return tokens / (double(k) * c + v);
}

DecoderOptions draft_decoder_options(const DecoderOptions& target) {
  DecoderOptions draft = target;
  draft.logits_per_seq = 1;
  draft.logits_every_row = false;
  draft.pass_rows = std::max<int64_t>(target.pass_rows, 2 * target.n_seqs);
  draft.kv_dtype.reset();
  return draft;
}

SpeculativeDecoder::SpeculativeDecoder(Decoder& target, Decoder* draft, const SpeculativeOptions& options)
    : target_(target), draft_(draft), options_(options), vocab_(target.vocab_size()) {
  MINFER_CHECK(options.k >= 1 && options.k <= 16, "speculative decoding drafts 1 to 16 tokens per round, not ",
               options.k);
  MINFER_CHECK(options.ngram >= 1 && options.min_match >= 1 && options.min_match <= options.ngram,
               "prompt lookup: ngram ", options.ngram, " and min_match ", options.min_match,
               " must satisfy 1 <= min_match <= ngram");
  MINFER_CHECK(target.max_logits_per_seq() >= options.k + 1, "speculative decoding with k = ", options.k,
               " needs a target decoder with room for ", options.k + 1, " logits rows per sequence");
  if (draft) {
    MINFER_CHECK(draft->vocab_size() == target.vocab_size(), "the draft model's vocabulary has ",
                 draft->vocab_size(), " tokens and the target's ", target.vocab_size(), ": they must be the same");
    MINFER_CHECK(draft->n_seqs() == target.n_seqs(), "the draft decoder has ", draft->n_seqs(),
                 " sequences and the target's ", target.n_seqs());
    // A round starts by feeding the draft model up to two tokens per sequence: the last draft
    // when every draft was accepted, and the target's token after it.
    MINFER_CHECK(draft->pass_rows() >= 2 * draft->n_seqs(), "the draft decoder needs room for 2 rows per sequence",
                 " per pass (pass_rows)");
    MINFER_CHECK(draft->n_ctx() >= target.n_ctx(), "the draft decoder's context (", draft->n_ctx(),
                 ") is shorter than the target's (", target.n_ctx(), ")");
  }
}

void SpeculativeDecoder::start(const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& options) {
  MINFER_CHECK(!options.sampling.cuts() && !options.sampling.processes_logits(),
               "speculative decoding samples with the temperature and top-p only (no top-k, min-p, penalties or bias)");
  const int64_t n = target_.n_seqs();
  gen_ = options;
  greedy_ = options.temperature == 0.0f;
  seqs_.assign(static_cast<size_t>(n), {});
  target_samplers_.clear();
  draft_samplers_.clear();
  for (int64_t s = 0; s < n; ++s) {
    Sequence& seq = seqs_[s];
    seq.context.reserve(prompts[s].size() + static_cast<size_t>(options.n_new));
    seq.context = prompts[s];
    seq.rows.resize(static_cast<size_t>(options_.k + 1));
    seq.lookup_limit = options_.k;
    if (draft_ && !greedy_) seq.q.resize(static_cast<size_t>(options_.k * vocab_));
    target_samplers_.emplace_back(vocab_, options.temperature, options.top_p, options.seed + uint64_t(s));
    // The drafter's coins come from a generator of their own (seeded apart from the target's;
    // xorshift's state must not be 0).
    const uint64_t draft_seed = (options.seed + uint64_t(s)) ^ 0x9E3779B97F4A7C15ull;
    draft_samplers_.emplace_back(vocab_, options.temperature, options.top_p, draft_seed != 0 ? draft_seed : 1);
  }
  chunks_.reserve(static_cast<size_t>(n));
  chunk_seq_.reserve(static_cast<size_t>(n));
  ids_.reserve(static_cast<size_t>(n * (options_.k + 1)));
}

void SpeculativeDecoder::emit(int64_t s, int32_t token, GenerateResult* result) {
  Sequence& seq = seqs_[s];
  if (seq.done) return;
  if (gen_.stop_at_eos && is_stop_token(target_.stop_ids(), token)) {
    seq.done = true;
    return;
  }
  seq.context.push_back(token);
  result->tokens[s].push_back(token);
  if (on_token_) on_token_(s, token);
  if (++seq.emitted >= gen_.n_new) seq.done = true;
}

GenerateResult SpeculativeDecoder::generate(const std::vector<std::vector<int32_t>>& prompts,
                                            const GenerateOptions& options,
                                            const std::function<void(int64_t, int32_t)>& on_token) {
  const int64_t n = target_.n_seqs();
  MINFER_CHECK(static_cast<int64_t>(prompts.size()) == n, "generate: ", prompts.size(), " prompts for ", n,
               " sequences");
  MINFER_CHECK(options.n_new >= 1, "generate: at least one new token, got ", options.n_new);
  for (const auto& p : prompts) {
    MINFER_CHECK(!p.empty(), "generate: a prompt needs at least one token (BOS)");
    check_fits_context(static_cast<int64_t>(p.size()), options.n_new, target_.n_ctx());
  }
  MINFER_CHECK(!options.prefill_one_by_one, "speculative decoding prefills in one batched pass");
  start(prompts, options);
  on_token_ = on_token;
  GenerateResult result;
  result.tokens.assign(static_cast<size_t>(n), {});
  for (auto& t : result.tokens) t.reserve(static_cast<size_t>(options.n_new));

  const double t0 = now_seconds();
  target_.reset();
  target_.prefill(prompts);
  if (draft_) {
    draft_->reset();
    draft_->prefill(prompts);
  }
  if (greedy_) target_.argmax(&ids_);
  for (int64_t s = 0; s < n; ++s)
    emit(s, greedy_ ? ids_[s] : target_samplers_[s].sample(target_.logits(s)), &result);
  result.prefill_seconds = now_seconds() - t0;
  for (const auto& p : prompts) result.prompt_tokens += static_cast<int64_t>(p.size());

  const double t1 = now_seconds();
  for (;;) {
    bool active = false;
    for (Sequence& seq : seqs_) {
      // A round emits at most budget + 1 tokens: never more than n_new in all, so the verify
      // pass stays inside the positions check_fits_context allowed.
      seq.budget = seq.done ? 0 : std::min(options_.k, gen_.n_new - seq.emitted - 1);
      seq.n_draft = 0;
      seq.rows[0] = seq.context.back();
      active = active || !seq.done;
    }
    if (!active) break;
    if (draft_)
      draft_with_model(&result);
    else
      draft_by_lookup();
    verify(&result);
  }
  result.decode_seconds = now_seconds() - t1;
  return result;
}

void SpeculativeDecoder::draft_by_lookup() {
  for (Sequence& seq : seqs_)
    if (seq.budget > 0)
      seq.n_draft = lookup_draft(seq.context.data(), static_cast<int64_t>(seq.context.size()), options_.ngram,
                                 options_.min_match, std::min(seq.budget, seq.lookup_limit), seq.rows.data() + 1);
}

// Step i feeds each drafting sequence what its draft cache lacks (step 0: the accepted tokens
// since its last round, at least the last one; later steps: the previous draft) and takes the
// next draft from the logits after it.
void SpeculativeDecoder::draft_with_model(GenerateResult* result) {
  for (int64_t i = 0; i < options_.k; ++i) {
    chunks_.clear();
    chunk_seq_.clear();
    for (int64_t s = 0; s < static_cast<int64_t>(seqs_.size()); ++s) {
      Sequence& seq = seqs_[s];
      if (seq.budget <= i) continue;
      const int64_t cached = draft_->position(s);
      if (i == 0)
        chunks_.push_back({s, seq.context.data() + cached, static_cast<int64_t>(seq.context.size()) - cached, true});
      else
        chunks_.push_back({s, seq.rows.data() + i, 1, true});
      chunk_seq_.push_back(s);
    }
    if (chunks_.empty()) return;
    draft_->forward_chunks(chunks_);
    ++result->draft_passes;
    if (greedy_) draft_->argmax_rows(static_cast<int64_t>(chunks_.size()), &ids_);
    for (size_t r = 0; r < chunks_.size(); ++r) {
      const int64_t s = chunk_seq_[r];
      Sequence& seq = seqs_[s];
      int32_t token;
      if (greedy_) {
        token = ids_[r];
      } else {
        float* q = seq.q.data() + i * vocab_;
        const float* logits = draft_->logits_row(static_cast<int64_t>(r));
        std::copy(logits, logits + vocab_, q);
        draft_samplers_[s].distribution(q);
        token = sample_mult(q, vocab_, draft_samplers_[s].coin());
      }
      seq.rows[i + 1] = token;
      seq.n_draft = i + 1;
    }
  }
}

// Row first_row + i of the verify pass holds the target's logits after rows[i]. Returns the token
// that follows the accepted drafts (the target's correction, or its token after the last draft).
int32_t SpeculativeDecoder::verify_sequence(Sequence& seq, int64_t s, int64_t first_row, int64_t* accepted) {
  *accepted = 0;
  if (greedy_) {
    while (*accepted < seq.n_draft && seq.rows[*accepted + 1] == ids_[first_row + *accepted]) ++*accepted;
    return ids_[first_row + *accepted];
  }
  Sampler& sampler = target_samplers_[s];
  for (int64_t i = 0; i < seq.n_draft; ++i) {
    float* p = target_.logits_row(first_row + i);
    sampler.distribution(p);
    const float accept_coin = sampler.coin();
    const Verdict verdict = accept_or_resample(p, draft_ ? seq.q.data() + i * vocab_ : nullptr, vocab_,
                                               seq.rows[i + 1], accept_coin, sampler.coin());
    if (!verdict.accepted) return verdict.token;
    ++*accepted;
  }
  return sampler.sample(target_.logits_row(first_row + seq.n_draft));
}

void SpeculativeDecoder::verify(GenerateResult* result) {
  chunks_.clear();
  chunk_seq_.clear();
  int64_t rows = 0;
  for (int64_t s = 0; s < static_cast<int64_t>(seqs_.size()); ++s) {
    Sequence& seq = seqs_[s];
    if (seq.done) continue;
    chunks_.push_back({s, seq.rows.data(), 1 + seq.n_draft, true, true});
    chunk_seq_.push_back(s);
    rows += 1 + seq.n_draft;
  }
  target_.forward_chunks(chunks_);
  if (greedy_) target_.argmax_rows(rows, &ids_);
  ++result->decode_steps;
  int64_t first_row = 0;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const int64_t s = chunk_seq_[c];
    Sequence& seq = seqs_[s];
    const int64_t position = static_cast<int64_t>(seq.context.size()) - 1;  // of rows[0]
    int64_t accepted = 0;
    const int32_t next = verify_sequence(seq, s, first_row, &accepted);
    first_row += 1 + seq.n_draft;
    result->drafted_tokens += seq.n_draft;
    result->accepted_tokens += accepted;
    if (!draft_ && seq.n_draft > 0)
      seq.lookup_limit = accepted == seq.n_draft ? std::min(options_.k, 2 * seq.lookup_limit) : accepted + 1;
    const int64_t before = seq.emitted;
    for (int64_t i = 1; i <= accepted; ++i) emit(s, seq.rows[i], result);
    emit(s, next, result);
    result->decode_tokens += seq.emitted - before;
    // The caches keep rows[0 .. accepted]; `next` is fed next round.
    target_.rewind(s, position + 1 + accepted);
    if (draft_) draft_->rewind(s, std::min(draft_->position(s), position + 1 + accepted));
  }
}

}  // namespace minfer
