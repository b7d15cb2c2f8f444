#include "engine/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "core/checked.h"
#include "core/clock.h"
#include "core/error.h"
#include "engine/decoder.h"

namespace minfer {

namespace {

int64_t argmax_of(const float* z, int64_t n) {
  return std::max_element(z, z + n) - z;
}

std::unique_ptr<Decoder> scoring_decoder(Model& model, int64_t n_ctx, int64_t max_rows,
                                         std::optional<DType> kv_dtype) {
  DecoderOptions options;
  options.kv_dtype = kv_dtype;
  options.n_seqs = 1;
  options.n_ctx = n_ctx;
  options.pass_rows = max_rows;
  options.logits_every_row = true;
  return std::make_unique<Decoder>(model, options);
}

// How many windows to score, once the window fits both models and the tokens fill at least one.
int64_t window_count(Model& model, Model* base, size_t n_tokens, const PerplexityOptions& options) {
  const int64_t n_ctx = options.n_ctx;
  const int64_t vocab = model.info().vocab_size;
  MINFER_CHECK(n_ctx >= 4 && n_ctx <= model.info().n_ctx, "perplexity: a window of ", n_ctx,
               " tokens: must be in [4, ", model.info().n_ctx, "], the model's context");
  MINFER_CHECK(options.max_rows >= 1, "perplexity: max_rows must be positive");
  const int64_t available = static_cast<int64_t>(n_tokens) / n_ctx;
  MINFER_CHECK(available >= 1, "perplexity: ", n_tokens, " tokens do not fill one window of ", n_ctx,
               " (use a longer text or a smaller --ctx)");
  if (base != nullptr) {
    MINFER_CHECK(base->info().vocab_size == vocab, "perplexity: the base model's vocabulary (",
                 base->info().vocab_size, ") is not the model's (", vocab, ")");
    MINFER_CHECK(n_ctx <= base->info().n_ctx, "perplexity: a window of ", n_ctx, " tokens exceeds the base model's ",
                 base->info().n_ctx, " positions");
  }
  return options.max_windows > 0 ? std::min(options.max_windows, available) : available;
}

// Everything scoring a window needs, allocated once: the decoders, one pass's tokens, and the base
// model's logits for one pass (raw, so that identical logits give a KL of exactly 0) with their
// log-sum-exps.
struct Scorer {
  int64_t n_ctx = 0, rows = 0, vocab = 0;
  int64_t first = 0;  // the first position whose prediction is scored
  std::unique_ptr<Decoder> decoder, base_decoder;
  std::vector<int32_t> pass;       // (rows)
  std::vector<float> base_logits;  // (rows, vocab)
  std::vector<double> base_lse;    // (rows)
};

Scorer make_scorer(Model& model, Model* base, const PerplexityOptions& options) {
  Scorer s;
  s.n_ctx = options.n_ctx;
  s.rows = std::min(options.max_rows, s.n_ctx);
  s.vocab = model.info().vocab_size;
  s.first = s.n_ctx / 2;
  s.decoder = scoring_decoder(model, s.n_ctx, s.rows, options.kv_dtype);
  if (base != nullptr) {
    s.base_decoder = scoring_decoder(*base, s.n_ctx, s.rows, options.kv_dtype);
    s.base_logits.resize(checked_product({uint64_t(s.rows), uint64_t(s.vocab)}, "base logits"));
    s.base_lse.resize(static_cast<size_t>(s.rows));
  }
  s.pass.reserve(static_cast<size_t>(s.rows));
  return s;
}

// The sums over every scored prediction so far. nll and nll2 are not side by side: GCC would add
// them as one vector of two and give up the fused multiply-add of nll2 (the last digits of
// ppl_error would move with the layout).
struct Sums {
  double nll = 0.0;
  int64_t n_tokens = 0, same_top = 0;
  double nll2 = 0.0, base_nll = 0.0;
  std::vector<double> kls;  // one per prediction, with a base model
};

// One scored prediction of `target`: its NLL and, against the base model's logits, its KL and
// whether both models' most likely token is the same.
void add_prediction(const float* z,  // (vocab)
                    const float* b,  // (vocab), the base model's; nullptr without one
                    double b_lse, int32_t target, int64_t vocab, Sums* sums) {
  const double lse = log_sum_exp(z, vocab);
  const double loss = lse - double(z[target]);
  sums->nll += loss;
  sums->nll2 += loss * loss;
  ++sums->n_tokens;
  if (b == nullptr) return;
  sums->base_nll += b_lse - double(b[target]);
  double kl = 0.0;
  for (int64_t j = 0; j < vocab; ++j) {
    const double log_p = double(b[j]) - b_lse, log_q = double(z[j]) - lse;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  sums->kls.push_back(std::max(kl, 0.0));  // rounding can leave -1e-17 where the true value is 0
  sums->same_top += argmax_of(b, vocab) == argmax_of(z, vocab) ? 1 : 0;
}

// One window from an empty cache, in passes of at most `rows` positions: the base model's pass
// first, keeping its scored logits, then the model's, adding its scored predictions.
void score_window(const std::vector<int32_t>& window, Scorer* s, Sums* sums) {
  s->decoder->reset();
  if (s->base_decoder) s->base_decoder->reset();
  // Is position p's prediction (of window[p + 1]) scored?
  auto scored = [&](int64_t p) { return p >= s->first && p < s->n_ctx - 1; };
  for (int64_t begin = 0; begin < s->n_ctx; begin += s->rows) {
    const int64_t count = std::min(s->rows, s->n_ctx - begin);
    s->pass.assign(window.begin() + begin, window.begin() + begin + count);
    if (s->base_decoder) {
      s->base_decoder->prefill_scored(0, s->pass, [&](int64_t i, const float* z) {
        if (!scored(begin + i)) return;
        std::copy(z, z + s->vocab, s->base_logits.begin() + i * s->vocab);
        s->base_lse[i] = log_sum_exp(z, s->vocab);
      });
    }
    s->decoder->prefill_scored(0, s->pass, [&](int64_t i, const float* z) {
      const int64_t p = begin + i;
      if (!scored(p)) return;
      const float* b = s->base_decoder ? s->base_logits.data() + i * s->vocab : nullptr;
      add_prediction(z, b, b ? s->base_lse[i] : 0.0, window[p + 1], s->vocab, sums);
    });
  }
}

// The KL statistics over every scored prediction (sorts sums->kls).
KlStats kl_stats(Sums* sums) {
  std::vector<double>& kls = sums->kls;
  const double n = double(sums->n_tokens);
  KlStats kl;
  for (double v : kls) kl.kl_mean += v;
  kl.kl_mean /= n;
  std::sort(kls.begin(), kls.end());
  // The 99th percentile, interpolated between neighbouring ranks (numpy's and llama.cpp's rule).
  const double at = 0.99 * double(kls.size() - 1);
  const size_t below = static_cast<size_t>(at);
  const size_t above = std::min(below + 1, kls.size() - 1);
  kl.kl_p99 = kls[below] + (at - double(below)) * (kls[above] - kls[below]);
  kl.kl_max = kls.back();
  kl.top1_agreement = double(sums->same_top) / n;
  kl.base_ppl = std::exp(sums->base_nll / n);
  return kl;
}

}  // namespace

double log_sum_exp(const float* z, int64_t n) {
  const double max = *std::max_element(z, z + n);
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(double(z[j]) - max);
  return max + std::log(sum);
}

PerplexityResult perplexity(Model& model, Model* base, const std::vector<int32_t>& tokens,
                            const PerplexityOptions& options,
                            const std::function<void(int64_t, int64_t, double)>& on_window) {
  const int64_t n_windows = window_count(model, base, tokens.size(), options);
  const int64_t n_ctx = options.n_ctx;
  Scorer scorer = make_scorer(model, base, options);
  Sums sums;
  const int64_t per_window = n_ctx - 1 - scorer.first;  // predictions scored per window
  if (base != nullptr) sums.kls.reserve(static_cast<size_t>(n_windows * per_window));

  PerplexityResult result;
  const double start = now_seconds();
  std::vector<int32_t> window(static_cast<size_t>(n_ctx));
  for (int64_t w = 0; w < n_windows; ++w) {
    std::copy(tokens.begin() + w * n_ctx, tokens.begin() + (w + 1) * n_ctx, window.begin());
    if (options.bos) window[0] = *options.bos;
    score_window(window, &scorer, &sums);
    ++result.n_windows;
    if (on_window) on_window(w + 1, n_windows, std::exp(sums.nll / double(sums.n_tokens)));
  }
  result.seconds = now_seconds() - start;
  result.n_tokens = sums.n_tokens;
  const double n = double(result.n_tokens);
  const double mean = sums.nll / n;
  result.ppl = std::exp(mean);
  const double variance = sums.nll2 / n - mean * mean;
  result.ppl_error = result.n_tokens > 1 && variance > 0 ? result.ppl * std::sqrt(variance / (n - 1)) : 0.0;
  if (base != nullptr) result.kl = kl_stats(&sums);
  return result;
}

}  // namespace minfer
