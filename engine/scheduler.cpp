#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>

#include "core/clock.h"
#include "core/error.h"

namespace minfer {

namespace {

void observe(uint64_t* counts, double value) {
  int b = 0;
  while (b < SchedulerMetrics::kBuckets && value > SchedulerMetrics::kBounds[b]) ++b;
  ++counts[b];
}

}  // namespace

const double SchedulerMetrics::kBounds[SchedulerMetrics::kBuckets] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                                        0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 60.0};

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
  }
  return "?";
}

struct Scheduler::Live {
  ServeRequest request;
  RequestStats stats;
  int64_t prompt_done = 0;  // prompt tokens already in the cache
  int32_t last = -1;        // the token sampled last, fed at the next step
  bool cancelled = false;
};

namespace {
DecoderOptions decoder_options(const SchedulerOptions& o) {
  MINFER_CHECK(o.slots >= 1 && o.slots <= 4096, "slots: ", o.slots, " must be in [1, 4096]");
  MINFER_CHECK(o.step_tokens >= o.slots, "step_tokens (", o.step_tokens, ") must be at least the slots (", o.slots,
               "): every slot decodes a row each step");
  MINFER_CHECK(o.max_queue >= 1, "max_queue must be positive");
  DecoderOptions d;
  d.n_seqs = o.slots;
  d.n_ctx = o.n_ctx;
  d.max_prefill_rows = o.step_tokens;
  d.kv_dtype = o.kv_dtype;
  return d;
}
}  // namespace

Scheduler::Scheduler(Model& model, const SchedulerOptions& options)
    : options_(options), decoder_(model, decoder_options(options)),
      vocab_(model.info().vocab_size), stop_ids_(model.info().stop_ids) {
  slots_.resize(static_cast<size_t>(options_.slots));
  padding_.assign(static_cast<size_t>(options_.slots), 0);
  samplers_.reserve(static_cast<size_t>(options_.slots));
  for (int64_t s = 0; s < options_.slots; ++s) samplers_.emplace_back(vocab_, 0.0f, 1.0f, 1);
  chunks_.reserve(static_cast<size_t>(options_.slots));
  logit_slots_.reserve(static_cast<size_t>(options_.slots));
  argmax_.reserve(static_cast<size_t>(options_.slots));
  cancels_.reserve(static_cast<size_t>(options_.slots + options_.max_queue));
}

Scheduler::~Scheduler() = default;

uint64_t Scheduler::submit(ServeRequest request) {
  const int64_t P = static_cast<int64_t>(request.prompt.size());
  auto refuse = [&](auto&&... parts) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++metrics_.requests_refused;
    }
    fail(parts...);
  };
  if (P == 0) refuse("the prompt has no tokens");
  for (int32_t t : request.prompt)
    if (t < 0 || t >= vocab_) refuse("prompt token ", t, " is outside the vocabulary [0, ", vocab_, ")");
  if (request.max_tokens < 1) refuse("max_tokens = ", request.max_tokens, ": at least 1");
  // The last generated token is never fed back: P + N - 1 positions (as check_fits_context says).
  if (P + request.max_tokens - 1 > decoder_.n_ctx())
    refuse("prompt of ", P, " tokens + ", request.max_tokens, " new tokens needs ", P, " + ", request.max_tokens,
           " - 1 = ", P + request.max_tokens - 1, " positions > context ", decoder_.n_ctx());
  if (!(request.temperature >= 0.0f)) refuse("temperature ", request.temperature, " must be >= 0");
  if (!(request.top_p > 0.0f && request.top_p <= 1.0f)) refuse("top_p ", request.top_p, " must be in (0, 1]");
  auto live = std::make_unique<Live>();
  live->request = std::move(request);
  live->stats.prompt_tokens = P;
  live->stats.submitted = now_seconds();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (static_cast<int64_t>(queue_.size()) >= options_.max_queue) {
      ++metrics_.requests_refused;
      throw QueueFullError(detail::concat("the queue is full (", options_.max_queue, " requests waiting)"));
    }
    id = next_id_++;
    live->stats.id = id;
    queue_.push_back(std::move(live));
    ++metrics_.requests_submitted;
    metrics_.queue_depth = static_cast<int64_t>(queue_.size());
  }
  wake_.notify_one();
  return id;
}

void Scheduler::cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancels_.push_back(id);
  }
  wake_.notify_one();
}

void Scheduler::cancel_all() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancel_all_ = true;
  }
  wake_.notify_one();
}

void Scheduler::notify() {
  { std::lock_guard<std::mutex> lock(mutex_); }  // run() is now before its check or in its wait
  wake_.notify_one();
}

SchedulerMetrics Scheduler::metrics() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return metrics_;
}

void Scheduler::record_finish_locked(const RequestStats& stats) {
  if (stats.reason == FinishReason::cancelled) ++metrics_.requests_cancelled;
  ++metrics_.requests_finished;
  if (stats.completion_tokens > 0) {
    observe(metrics_.ttft_counts, stats.ttft());
    metrics_.ttft_sum += stats.ttft();
    ++metrics_.ttft_n;
  }
  if (stats.completion_tokens > 1) {
    observe(metrics_.tpot_counts, stats.tpot());
    metrics_.tpot_sum += stats.tpot();
    ++metrics_.tpot_n;
  }
}

void Scheduler::retire(int64_t slot, FinishReason reason, double now) {
  std::unique_ptr<Live> live = std::move(slots_[slot]);
  // A static batch's finished sequence goes on decoding where it was (see step()).
  if (options_.policy == SchedulerOptions::Policy::static_batches) padding_[slot] = 1;
  else decoder_.reset_sequence(slot);
  live->stats.reason = reason;
  live->stats.finished = now;
  if (live->stats.first_token == 0) live->stats.first_token = now;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    record_finish_locked(live->stats);
  }
  if (live->request.on_finish) live->request.on_finish(live->stats);
}

// Called with mutex_ held: moves waiting requests into free slots (all at once, and only when
// every slot is free, under Policy::static_batches).
void Scheduler::admit_locked() {
  const bool all_free = std::all_of(slots_.begin(), slots_.end(), [](const auto& s) { return s == nullptr; });
  if (options_.policy == SchedulerOptions::Policy::static_batches) {
    if (!all_free) return;
    std::fill(padding_.begin(), padding_.end(), 0);  // the batch is over
  }
  const double now = now_seconds();
  for (int64_t s = 0; s < options_.slots && !queue_.empty(); ++s) {
    if (slots_[s] != nullptr) continue;
    std::unique_ptr<Live> live = std::move(queue_.front());
    queue_.pop_front();
    live->stats.admitted = now;
    const ServeRequest& r = live->request;
    samplers_[s] = Sampler(vocab_, r.temperature, r.top_p, r.seed);
    decoder_.reset_sequence(s);
    slots_[s] = std::move(live);
  }
  metrics_.queue_depth = static_cast<int64_t>(queue_.size());
}

bool Scheduler::step() {
  std::vector<std::unique_ptr<Live>> cancelled_queued;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Cancellations first: queued requests leave the queue, running ones are marked.
    if (cancel_all_) {
      cancel_all_ = false;
      while (!queue_.empty()) {
        cancelled_queued.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      for (auto& s : slots_)
        if (s) s->cancelled = true;
    }
    for (uint64_t id : cancels_) {
      for (auto it = queue_.begin(); it != queue_.end(); ++it)
        if ((*it)->stats.id == id) {
          cancelled_queued.push_back(std::move(*it));
          queue_.erase(it);
          break;
        }
      for (auto& s : slots_)
        if (s && s->stats.id == id) s->cancelled = true;
    }
    cancels_.clear();
    metrics_.queue_depth = static_cast<int64_t>(queue_.size());
  }
  const double start = now_seconds();
  for (auto& q : cancelled_queued) {
    q->stats.reason = FinishReason::cancelled;
    q->stats.finished = start;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      record_finish_locked(q->stats);
    }
    if (q->request.on_finish) q->request.on_finish(q->stats);
  }
  for (int64_t s = 0; s < options_.slots; ++s)
    if (slots_[s] && slots_[s]->cancelled) retire(s, FinishReason::cancelled, start);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    admit_locked();
  }

  // The step's rows: every generating slot's decode row, then prompt chunks oldest first.
  chunks_.clear();
  logit_slots_.clear();
  int64_t budget = options_.step_tokens;
  last_decode_rows_ = last_prompt_rows_ = 0;
  for (int64_t s = 0; s < options_.slots; ++s) {
    Live* l = slots_[s].get();
    if (l == nullptr || l->prompt_done < static_cast<int64_t>(l->request.prompt.size())) continue;
    chunks_.push_back({s, &l->last, 1, true});
    --budget;
    ++last_decode_rows_;
  }
  // Static batches: the finished sequences of the running batch go on decoding, as a batch of
  // fixed shape does (`generate --batch`, a padded batch in transformers): a row at the next
  // position, attending to the whole cache of its sequence, with logits that nothing samples. One
  // that reaches the end of its slot's context starts over at position 0.
  for (int64_t s = 0; s < options_.slots; ++s) {
    if (!padding_[s] || slots_[s] != nullptr) continue;
    if (decoder_.position(s) >= decoder_.n_ctx()) decoder_.reset_sequence(s);
    chunks_.push_back({s, &padding_token_, 1, true});
    --budget;
  }
  // Prefilling slots by admission time, so that the oldest prompt finishes first.
  for (bool progress = true; progress && budget > 0;) {
    progress = false;
    int64_t oldest = -1;
    for (int64_t s = 0; s < options_.slots; ++s) {
      Live* l = slots_[s].get();
      if (l == nullptr || l->prompt_done >= static_cast<int64_t>(l->request.prompt.size())) continue;
      bool taken = false;
      for (const auto& c : chunks_) taken = taken || c.seq == s;
      if (taken) continue;
      if (oldest < 0 || l->stats.admitted < slots_[oldest]->stats.admitted ||
          (l->stats.admitted == slots_[oldest]->stats.admitted && l->stats.id < slots_[oldest]->stats.id))
        oldest = s;
    }
    if (oldest < 0) break;
    Live* l = slots_[oldest].get();
    const int64_t left = static_cast<int64_t>(l->request.prompt.size()) - l->prompt_done;
    const int64_t n = std::min(left, budget);
    const bool last = n == left;
    chunks_.push_back({oldest, l->request.prompt.data() + l->prompt_done, n, last});
    l->prompt_done += n;
    budget -= n;
    last_prompt_rows_ += n;
    progress = true;
  }
  if (chunks_.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    metrics_.busy_slots = 0;
    return false;
  }
  // The logits rows follow the chunks that asked for them, in order.
  for (const auto& c : chunks_)
    if (c.logits) logit_slots_.push_back(c.seq);

  decoder_.forward_chunks(chunks_);
  const int64_t n_logits = static_cast<int64_t>(logit_slots_.size());
  decoder_.argmax_rows(n_logits, &argmax_);  // also waits for the forward pass
  const double now = now_seconds();
  int64_t generated = 0;
  for (int64_t i = 0; i < n_logits; ++i) {
    const int64_t s = logit_slots_[i];
    Live* l = slots_[s].get();
    if (l == nullptr) continue;  // a finished row of a static batch: computed, thrown away
    const int32_t token = samplers_[s].greedy() ? argmax_[i] : samplers_[s].sample(decoder_.logits_row(i));
    const ServeRequest& r = l->request;
    const bool stop = (r.stop_at_eos && is_stop_token(stop_ids_, token)) ||
                      std::find(r.stop_tokens.begin(), r.stop_tokens.end(), token) != r.stop_tokens.end();
    if (stop) {
      retire(s, FinishReason::stop, now);
      continue;
    }
    if (l->stats.completion_tokens == 0) l->stats.first_token = now;
    ++l->stats.completion_tokens;
    ++generated;
    l->last = token;
    const bool more = r.on_token ? r.on_token(token) : true;
    if (!more) retire(s, FinishReason::stop, now);
    else if (l->stats.completion_tokens >= r.max_tokens) retire(s, FinishReason::length, now);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    metrics_.prompt_tokens += uint64_t(last_prompt_rows_);
    metrics_.generated_tokens += uint64_t(generated);
    ++metrics_.steps;
    // Slots freed by this step go to waiting requests now, so their prompts join the next step.
    admit_locked();
    int64_t busy = 0;
    for (const auto& s : slots_) busy += s ? 1 : 0;
    metrics_.busy_slots = busy;
  }
  return true;
}

void Scheduler::run(const std::atomic<bool>& stop) {
  for (;;) {
    if (step()) continue;
    std::unique_lock<std::mutex> lock(mutex_);
    if (stop.load()) return;
    wake_.wait(lock, [&] {
      const bool work = stop.load() || !queue_.empty() || !cancels_.empty() || cancel_all_;
      if (!work && before_sleep_) before_sleep_();
      return work;
    });
  }
}

}  // namespace minfer
