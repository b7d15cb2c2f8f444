#include "engine/logprobs.h"

#include <algorithm>

#include "core/error.h"
#include "engine/perplexity.h"

namespace minfer {

RowLogprobs::RowLogprobs(int64_t vocab_size) : row_(static_cast<size_t>(vocab_size)) {
  top_.reserve(kMaxTopLogprobs);
}

void RowLogprobs::read(const float* row, int n_top) {
  MINFER_CHECK(n_top >= 0 && n_top <= kMaxTopLogprobs, "top logprobs: ", n_top, " must be in [0, ",
               kMaxTopLogprobs, "]");
  const auto n = static_cast<int64_t>(row_.size());
  std::copy(row, row + n, row_.begin());
  log_sum_exp_ = log_sum_exp(row, n);
  // The n_top largest logits, kept sorted in top_ (a vocabulary-long pass with a short insertion).
  top_.clear();
  auto before = [](const TokenLogprob& a, const TokenLogprob& b) {
    return a.logprob > b.logprob || (a.logprob == b.logprob && a.token < b.token);
  };
  for (int64_t i = 0; i < n && n_top > 0; ++i) {
    const TokenLogprob entry{static_cast<int32_t>(i), row[i]};
    if (static_cast<int>(top_.size()) == n_top && !before(entry, top_.back())) continue;
    if (static_cast<int>(top_.size()) == n_top) top_.pop_back();
    top_.insert(std::upper_bound(top_.begin(), top_.end(), entry, before), entry);
  }
  for (TokenLogprob& t : top_) t.logprob = static_cast<float>(double(t.logprob) - log_sum_exp_);
}

SampledLogprobs RowLogprobs::of(int32_t token) const {
  const float logprob = static_cast<float>(double(row_[static_cast<size_t>(token)]) - log_sum_exp_);
  return {{token, logprob}, top_.data(), static_cast<int>(top_.size())};
}

}  // namespace minfer
