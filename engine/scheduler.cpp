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
  MINFER_CHECK(o.pass_rows >= o.slots, "pass_rows (--step-tokens, ", o.pass_rows, ") must be at least the slots (",
               o.slots, "): every slot decodes a row each step");
  MINFER_CHECK(o.max_queue >= 1, "max_queue must be positive");
  DecoderOptions d;
  d.n_seqs = o.slots;
  d.n_ctx = o.n_ctx;
  d.pass_rows = o.pass_rows;
  d.kv_dtype = o.kv_dtype;
  return d;
}
}  // namespace

Scheduler::Scheduler(Model& model, const SchedulerOptions& options)
    : options_(options), decoder_(model, decoder_options(options)),
      vocab_(model.info().vocab_size), stop_ids_(model.info().stop_ids) {
  slots_.resize(static_cast<size_t>(options_.slots));
  if (options_.policy == SchedulerOptions::Policy::static_batches) static_batches_.emplace(options_.slots);
  samplers_.reserve(static_cast<size_t>(options_.slots));
  cached_.resize(static_cast<size_t>(options_.slots));
  for (auto& tokens : cached_) tokens.reserve(static_cast<size_t>(decoder_.n_ctx()));
  last_used_.assign(static_cast<size_t>(options_.slots), 0);
  for (int64_t s = 0; s < options_.slots; ++s) samplers_.emplace_back(vocab_, 0.0f, 1.0f, 1);
  chunks_.reserve(static_cast<size_t>(options_.slots));
  logit_slots_.reserve(static_cast<size_t>(options_.slots));
  argmax_.reserve(static_cast<size_t>(options_.slots));
  cancels_.reserve(static_cast<size_t>(options_.slots + options_.max_queue));
  cancelled_queued_.reserve(static_cast<size_t>(options_.max_queue));
}

Scheduler::~Scheduler() = default;

namespace {
// Throws Error naming what a request gets wrong that no waiting would fix.
void check_request(const ServeRequest& request, int64_t vocab, int64_t n_ctx) {
  const int64_t P = static_cast<int64_t>(request.prompt.size());
  MINFER_CHECK(P > 0, "the prompt has no tokens");
  for (int32_t t : request.prompt)
    MINFER_CHECK(t >= 0 && t < vocab, "prompt token ", t, " is outside the vocabulary [0, ", vocab, ")");
  MINFER_CHECK(request.max_tokens >= 1, "max_tokens = ", request.max_tokens, ": at least 1");
  check_fits_context(P, request.max_tokens, n_ctx);
  MINFER_CHECK(request.temperature >= 0.0f, "temperature ", request.temperature, " must be >= 0");
  MINFER_CHECK(request.top_p > 0.0f && request.top_p <= 1.0f, "top_p ", request.top_p, " must be in (0, 1]");
  MINFER_CHECK(request.seed != 0, "seed 0: the sampler's xorshift state must not be 0");
}
}  // namespace

uint64_t Scheduler::submit(ServeRequest request) {
  const int64_t P = static_cast<int64_t>(request.prompt.size());
  try {
    check_request(request, vocab_, decoder_.n_ctx());
  } catch (const Error&) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++metrics_.requests_refused;
    throw;
  }
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
  // A static batch's finished sequence goes on decoding where it was (build_rows).
  if (static_batches_) static_batches_->finished(slot);
  else if (!caching()) decoder_.reset_sequence(slot);
  last_used_[slot] = metrics_.steps + 1;  // 0: never used
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
  if (static_batches_ && !static_batches_->may_admit(all_free)) return;
  const double now = now_seconds();
  while (!queue_.empty()) {
    int64_t reuse = 0;
    const int64_t s = choose_free_slot(queue_.front()->request.prompt, &reuse);
    if (s < 0) break;
    std::unique_ptr<Live> live = std::move(queue_.front());
    queue_.pop_front();
    live->stats.admitted = now;
    const ServeRequest& r = live->request;
    samplers_[s].restart(r.temperature, r.top_p, r.seed);
    decoder_.rewind(s, reuse);
    cached_[s].resize(static_cast<size_t>(reuse));
    live->prompt_done = reuse;
    live->stats.cached_tokens = reuse;
    metrics_.prompt_tokens_cached += uint64_t(reuse);
    if (live->request.on_admit) live->request.on_admit(live->stats);
    slots_[s] = std::move(live);
  }
  metrics_.queue_depth = static_cast<int64_t>(queue_.size());
}

bool Scheduler::caching() const {
  return options_.prompt_cache && options_.policy == SchedulerOptions::Policy::continuous;
}

// The free slot for `prompt` (-1 when none is free) and how many of its cached positions it keeps
// (*reuse). The prompt continues a slot when it begins with at least three quarters of what the
// slot holds (the conversation that slot served, sent again with a new turn; the last answer's
// final tokens may tokenize otherwise once the turn is closed), or when three quarters of the
// prompt are in the slot (the same prompt again, a regenerated answer). Otherwise it goes to the slot used
// least recently (never-used ones first), whose cache is the least likely to be wanted again, and
// reuses whatever prefix it shares with it.
// note: choosing by the longest shared prefix alone would send every new conversation (all open
// with the same BOS and system message) to a slot that holds another one, evicting that history
// while other slots stay empty, and two conversations taking turns would evict each other.
int64_t Scheduler::choose_free_slot(const std::vector<int32_t>& prompt, int64_t* reuse) const {
  int64_t continued = -1, continued_shared = 0, oldest = -1;
  for (int64_t s = 0; s < options_.slots; ++s) {
    if (slots_[s] != nullptr) continue;
    if (oldest < 0 || last_used_[s] < last_used_[oldest]) oldest = s;
    const int64_t shared = shared_prefix(s, prompt);
    const bool continues = 4 * shared >= 3 * static_cast<int64_t>(cached_[s].size()) ||
                           4 * shared >= 3 * (static_cast<int64_t>(prompt.size()) - 1);
    if (shared > continued_shared && continues) {
      continued = s;
      continued_shared = shared;
    }
  }
  const int64_t chosen = continued >= 0 ? continued : oldest;
  *reuse = chosen >= 0 ? shared_prefix(chosen, prompt) : 0;
  return chosen;
}

// The tokens slot `s` holds that begin `prompt`, short of its last token (whose logits are
// wanted); 0 without prompt caching.
int64_t Scheduler::shared_prefix(int64_t s, const std::vector<int32_t>& prompt) const {
  return caching() ? reusable_prefix(cached_[s], prompt) : 0;
}

// Cancellations first: queued requests leave the queue and finish at once, running ones retire.
void Scheduler::take_cancellations() {
  cancelled_queued_.clear();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto cancel_running = [&](auto&& matches) {
      for (auto& s : slots_)
        if (s && matches(*s)) s->cancelled = true;
    };
    if (cancel_all_) {
      cancel_all_ = false;
      for (auto& q : queue_) cancelled_queued_.push_back(std::move(q));
      queue_.clear();
      cancel_running([](const Live&) { return true; });
    }
    for (uint64_t id : cancels_) {
      auto it = std::find_if(queue_.begin(), queue_.end(), [&](const auto& q) { return q->stats.id == id; });
      if (it != queue_.end()) {
        cancelled_queued_.push_back(std::move(*it));
        queue_.erase(it);
      }
      cancel_running([&](const Live& l) { return l.stats.id == id; });
    }
    cancels_.clear();
    metrics_.queue_depth = static_cast<int64_t>(queue_.size());
  }
  const double now = now_seconds();
  for (auto& q : cancelled_queued_) {
    q->stats.reason = FinishReason::cancelled;
    q->stats.finished = now;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      record_finish_locked(q->stats);
    }
    if (q->request.on_finish) q->request.on_finish(q->stats);
  }
  cancelled_queued_.clear();
  for (int64_t s = 0; s < options_.slots; ++s)
    if (slots_[s] && slots_[s]->cancelled) retire(s, FinishReason::cancelled, now);
}

// The step's rows: every generating slot's decode row, the finished rows of a static batch, then
// prompt chunks, oldest first, up to the step's budget. Returns false when there are none.
bool Scheduler::build_rows() {
  chunks_.clear();
  logit_slots_.clear();
  int64_t budget = options_.pass_rows;
  last_decode_rows_ = last_prompt_rows_ = 0;
  for (int64_t s = 0; s < options_.slots; ++s) {
    Live* l = slots_[s].get();
    if (l == nullptr || l->prompt_done < static_cast<int64_t>(l->request.prompt.size())) continue;
    chunks_.push_back({s, &l->last, 1, true});
    cached_[s].push_back(l->last);
    --budget;
    ++last_decode_rows_;
  }
  if (static_batches_) budget -= static_batches_->add_finished_rows(decoder_, chunks_);
  for (int64_t s = oldest_prefilling(); s >= 0 && budget > 0; s = oldest_prefilling()) {
    Live* l = slots_[s].get();
    const int64_t left = static_cast<int64_t>(l->request.prompt.size()) - l->prompt_done;
    const int64_t n = std::min(left, budget);
    chunks_.push_back({s, l->request.prompt.data() + l->prompt_done, n, n == left});
    cached_[s].insert(cached_[s].end(), l->request.prompt.begin() + l->prompt_done,
                      l->request.prompt.begin() + l->prompt_done + n);
    l->prompt_done += n;
    budget -= n;
    last_prompt_rows_ += n;
  }
  // The logits rows follow the chunks that asked for them, in order.
  for (const auto& c : chunks_)
    if (c.logits) logit_slots_.push_back(c.seq);
  return !chunks_.empty();
}

// The slot whose prompt is still being read and has no chunk in this step yet, admitted first
// (ties by request id); -1 if none.
int64_t Scheduler::oldest_prefilling() const {
  int64_t oldest = -1;
  for (int64_t s = 0; s < options_.slots; ++s) {
    const Live* l = slots_[s].get();
    if (l == nullptr || l->prompt_done >= static_cast<int64_t>(l->request.prompt.size())) continue;
    if (std::any_of(chunks_.begin(), chunks_.end(), [&](const Decoder::Chunk& c) { return c.seq == s; })) continue;
    const Live* o = oldest < 0 ? nullptr : slots_[oldest].get();
    if (o == nullptr || l->stats.admitted < o->stats.admitted ||
        (l->stats.admitted == o->stats.admitted && l->stats.id < o->stats.id))
      oldest = s;
  }
  return oldest;
}

// A token for every row that asked for logits, with its request's sampler; the requests that
// stopped, reached max_tokens or were refused by their callback retire. Returns the tokens made.
int64_t Scheduler::sample_and_retire() {
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
  return generated;
}

bool Scheduler::step() {
  take_cancellations();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    admit_locked();
  }
  if (!build_rows()) {
    std::lock_guard<std::mutex> lock(mutex_);
    metrics_.busy_slots = 0;
    return false;
  }
  decoder_.forward_chunks(chunks_);
  const int64_t generated = sample_and_retire();
  std::lock_guard<std::mutex> lock(mutex_);
  metrics_.prompt_tokens += uint64_t(last_prompt_rows_);
  metrics_.generated_tokens += uint64_t(generated);
  ++metrics_.steps;
  // Slots freed by this step go to waiting requests now, so their prompts join the next step.
  admit_locked();
  metrics_.busy_slots = std::count_if(slots_.begin(), slots_.end(), [](const auto& s) { return s != nullptr; });
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
