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
  options.max_prefill_rows = max_rows;
  options.logits_every_row = true;
  return std::make_unique<Decoder>(model, options);
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
  const int64_t n_ctx = options.n_ctx;
  const int64_t vocab = model.info().vocab_size;
  MINFER_CHECK(n_ctx >= 4 && n_ctx <= model.info().n_ctx, "perplexity: a window of ", n_ctx,
               " tokens: must be in [4, ", model.info().n_ctx, "], the model's context");
  MINFER_CHECK(options.max_rows >= 1, "perplexity: max_rows must be positive");
  const int64_t available = static_cast<int64_t>(tokens.size()) / n_ctx;
  MINFER_CHECK(available >= 1, "perplexity: ", tokens.size(), " tokens do not fill one window of ", n_ctx,
               " (use a longer text or a smaller --ctx)");
  const int64_t n_windows = options.max_windows > 0 ? std::min(options.max_windows, available) : available;
  if (base != nullptr) {
    MINFER_CHECK(base->info().vocab_size == vocab, "perplexity: the base model's vocabulary (",
                 base->info().vocab_size, ") is not the model's (", vocab, ")");
    MINFER_CHECK(n_ctx <= base->info().n_ctx, "perplexity: a window of ", n_ctx, " tokens exceeds the base model's ",
                 base->info().n_ctx, " positions");
  }
  const int64_t rows = std::min(options.max_rows, n_ctx);
  auto decoder = scoring_decoder(model, n_ctx, rows, options.kv_dtype);
  std::unique_ptr<Decoder> base_decoder;
  // Everything the loop needs, allocated here: the base model's logits for one pass (raw, so that
  // identical logits give a KL of exactly 0) with their log-sum-exps, and one KL per position.
  std::vector<float> base_logits;
  std::vector<double> base_lse;
  std::vector<double> kls;
  const int64_t first = n_ctx / 2;              // the first position whose prediction is scored
  const int64_t per_window = n_ctx - 1 - first;  // predictions scored per window
  if (base != nullptr) {
    base_decoder = scoring_decoder(*base, n_ctx, rows, options.kv_dtype);
    base_logits.resize(checked_product({uint64_t(rows), uint64_t(vocab)}, "base logits"));
    base_lse.resize(static_cast<size_t>(rows));
    kls.reserve(static_cast<size_t>(n_windows * per_window));
  }

  PerplexityResult result;
  double nll = 0.0, nll2 = 0.0, base_nll = 0.0;
  int64_t same_top = 0;
  const double start = now_seconds();
  std::vector<int32_t> window(static_cast<size_t>(n_ctx));
  std::vector<int32_t> pass;
  pass.reserve(static_cast<size_t>(rows));
  for (int64_t w = 0; w < n_windows; ++w) {
    std::copy(tokens.begin() + w * n_ctx, tokens.begin() + (w + 1) * n_ctx, window.begin());
    if (options.bos) window[0] = *options.bos;
    decoder->reset();
    if (base_decoder) base_decoder->reset();
    for (int64_t begin = 0; begin < n_ctx; begin += rows) {
      const int64_t count = std::min(rows, n_ctx - begin);
      pass.assign(window.begin() + begin, window.begin() + begin + count);
      // Is position p's prediction (of window[p + 1]) scored?
      auto scored = [&](int64_t p) { return p >= first && p < n_ctx - 1; };
      if (base_decoder) {
        base_decoder->prefill_scored(0, pass, [&](int64_t i, const float* z) {
          if (!scored(begin + i)) return;
          std::copy(z, z + vocab, base_logits.begin() + i * vocab);
          base_lse[i] = log_sum_exp(z, vocab);
        });
      }
      decoder->prefill_scored(0, pass, [&](int64_t i, const float* z) {
        const int64_t p = begin + i;
        if (!scored(p)) return;
        const int32_t target = window[p + 1];
        const double lse = log_sum_exp(z, vocab);
        const double loss = lse - double(z[target]);
        nll += loss;
        nll2 += loss * loss;
        ++result.n_tokens;
        if (!base_decoder) return;
        const float* b = base_logits.data() + i * vocab;
        base_nll += base_lse[i] - double(b[target]);
        double kl = 0.0;
        for (int64_t j = 0; j < vocab; ++j) {
          const double log_p = double(b[j]) - base_lse[i], log_q = double(z[j]) - lse;
          kl += std::exp(log_p) * (log_p - log_q);
        }
        kls.push_back(std::max(kl, 0.0));  // rounding can leave -1e-17 where the true value is 0
        same_top += argmax_of(b, vocab) == argmax_of(z, vocab) ? 1 : 0;
      });
    }
    ++result.n_windows;
    if (on_window) on_window(w + 1, n_windows, std::exp(nll / double(result.n_tokens)));
  }
  result.seconds = now_seconds() - start;
  const double n = double(result.n_tokens);
  const double mean = nll / n;
  result.ppl = std::exp(mean);
  const double variance = nll2 / n - mean * mean;
  result.ppl_error = result.n_tokens > 1 && variance > 0 ? result.ppl * std::sqrt(variance / (n - 1)) : 0.0;
  if (base_decoder) {
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
    kl.top1_agreement = double(same_top) / n;
    kl.base_ppl = std::exp(base_nll / n);
    result.kl = kl;
  }
  return result;
}

}  // namespace minfer
