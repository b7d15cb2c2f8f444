#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>
#include <limits>

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
  // The prompt, then every token delivered (reserved for all of them at submit()).
  std::vector<int32_t> tokens;
  int64_t n_input = 0;      // tokens to prefill: the prompt, or every token so far after a preemption
  int64_t prompt_done = 0;  // of those, the ones in the cache
  int64_t prompt_scored = 1;  // prompt_logprobs: the prompt token whose logprobs come next
  int32_t last = -1;        // the token sampled last, fed at the next step
  bool cancelled = false;
  // Paged cache: the blocks its table names (reserved for a whole context at submit()), how many
  // of the first are full and remembered, and the key of the tokens in those.
  std::vector<int32_t> blocks;
  int64_t n_remembered = 0;
  uint64_t key = 0;  // BlockPool::root(request.cache_scope) before the first block
  uint64_t admission = 0;      // its place among admissions (preemption takes the newest)
  uint64_t sampler_state = 0;  // after a preemption: the generator's state to resume with
  // The tokens request.constraint allows next (TokenConstraint's mask; sized at submit(), when
  // there is a constraint), filled while the step's forward pass runs.
  std::vector<uint32_t> mask;
  bool admitted_before = false;
  // Whether its prompt rows still have logprobs to give (then no prompt cache and every row's logits).
  bool scores_prompt() const {
    return request.prompt_logprobs && prompt_scored < static_cast<int64_t>(request.prompt.size());
  }
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
  MINFER_CHECK(o.kv_blocks >= 0, "kv_blocks ", o.kv_blocks, " must be >= 0");
  MINFER_CHECK(o.kv_blocks == 0 || o.policy == SchedulerOptions::Policy::continuous,
               "static batches keep a whole context per slot: no block pool (kv_blocks)");
  d.kv_blocks = o.policy == SchedulerOptions::Policy::continuous ? o.kv_blocks : 0;
  d.kv_block_size = o.kv_block_size;
  d.extra_logit_rows = kPromptLogitsRows;
  return d;
}
}  // namespace

Scheduler::Scheduler(Model& model, const SchedulerOptions& options)
    : options_(options), decoder_(model, decoder_options(options)),
      vocab_(model.info().vocab_size), stop_ids_(model.info().stop_ids), row_logprobs_(vocab_),
      masked_row_(static_cast<size_t>(vocab_)) {
  slots_.resize(static_cast<size_t>(options_.slots));
  if (options_.policy == SchedulerOptions::Policy::static_batches) static_batches_.emplace(options_.slots);
  samplers_.reserve(static_cast<size_t>(options_.slots));
  if (paged()) {
    const KvCache& cache = decoder_.cache();
    if (options_.kv_blocks == 0) options_.kv_blocks = cache.n_blocks();
    blocks_.emplace(cache.n_blocks(), cache.block_size());
    // The contiguous tables the decoder starts with name every block: empty them.
    for (int64_t s = 0; s < options_.slots; ++s) decoder_.set_blocks(s, nullptr, 0, 0);
    update_gauges_locked();  // no other thread knows this scheduler yet
  }
  for (int64_t s = 0; s < options_.slots; ++s) samplers_.emplace_back(vocab_, 0.0f, 1.0f, 1);
  chunks_.reserve(static_cast<size_t>(options_.slots));
  logit_slots_.reserve(static_cast<size_t>(decoder_.logit_rows()));
  logit_scores_.reserve(static_cast<size_t>(decoder_.logit_rows()));
  argmax_.reserve(static_cast<size_t>(decoder_.logit_rows()));
  cancels_.reserve(static_cast<size_t>(options_.slots + options_.max_queue));
  // Preempted requests go back to the queue past max_queue: at most one per slot.
  cancelled_queued_.reserve(static_cast<size_t>(options_.max_queue + options_.slots));
}

Scheduler::~Scheduler() = default;

namespace {
// Throws Error naming what a request gets wrong that no waiting would fix.
void check_request(const ServeRequest& request, int64_t vocab, int64_t n_ctx, const BlockPool* pool) {
  const int64_t P = static_cast<int64_t>(request.prompt.size());
  MINFER_CHECK(P > 0, "the prompt has no tokens");
  for (int32_t t : request.prompt)
    MINFER_CHECK(t >= 0 && t < vocab, "prompt token ", t, " is outside the vocabulary [0, ", vocab, ")");
  const int64_t least = request.prompt_logprobs ? 0 : 1;  // the prompt's logprobs may be all it asks for
  MINFER_CHECK(request.max_tokens >= least, "max_tokens = ", request.max_tokens, ": at least ", least);
  check_fits_context(P, request.max_tokens, n_ctx);
  if (pool != nullptr) {
    const int64_t needed = KvCache::blocks_for(P + std::max<int64_t>(request.max_tokens, 1) - 1, pool->block_size());
    MINFER_CHECK(needed <= pool->n_blocks(), "prompt of ", P, " tokens + ", request.max_tokens, " new tokens needs ",
                 needed, " blocks of ", pool->block_size(), " positions > the KV cache's ", pool->n_blocks());
  }
  MINFER_CHECK(request.temperature >= 0.0f, "temperature ", request.temperature, " must be >= 0");
  MINFER_CHECK(request.top_p > 0.0f && request.top_p <= 1.0f, "top_p ", request.top_p, " must be in (0, 1]");
  MINFER_CHECK(request.seed != 0, "seed 0: the sampler's xorshift state must not be 0");
  check_sampling_options(request.sampling, vocab);
  MINFER_CHECK(request.top_logprobs >= -1 && request.top_logprobs <= RowLogprobs::kMaxTopLogprobs, "top_logprobs ",
               request.top_logprobs, " must be in [-1, ", RowLogprobs::kMaxTopLogprobs, "]");
  MINFER_CHECK(!request.prompt_logprobs || request.top_logprobs >= 0, "prompt_logprobs needs top_logprobs >= 0");
}
}  // namespace

uint64_t Scheduler::submit(ServeRequest request) {
  const int64_t P = static_cast<int64_t>(request.prompt.size());
  try {
    check_request(request, vocab_, decoder_.n_ctx(), blocks_ ? &*blocks_ : nullptr);
  } catch (const Error&) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++metrics_.requests_refused;
    throw;
  }
  auto live = std::make_unique<Live>();
  live->request = std::move(request);
  live->tokens.reserve(static_cast<size_t>(P + live->request.max_tokens));
  live->tokens = live->request.prompt;
  live->n_input = P;
  live->key = BlockPool::root(live->request.cache_scope);
  live->blocks.reserve(static_cast<size_t>(decoder_.cache().blocks_per_seq()));
  if (live->request.constraint) live->mask.resize(static_cast<size_t>(TokenConstraint::mask_words(vocab_)));
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
  // A static batch's finished sequence goes on decoding where it was (build_rows).
  if (static_batches_) static_batches_->finished(slot);
  else release_blocks(slot);
  std::unique_ptr<Live> live = std::move(slots_[slot]);
  live->stats.reason = reason;
  live->stats.finished = now;
  if (live->stats.first_token == 0) live->stats.first_token = now;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    record_finish_locked(live->stats);
  }
  if (live->request.on_finish) live->request.on_finish(live->stats);
}

// Called with mutex_ held: moves waiting requests into free slots, oldest first (all at once, and
// only when every slot is free, under Policy::static_batches). A paged request that does not fit
// yet, or waits for a prefill, holds the queue (first come, first served).
void Scheduler::admit_locked() {
  const bool all_free = std::all_of(slots_.begin(), slots_.end(), [](const auto& s) { return s == nullptr; });
  if (static_batches_ && !static_batches_->may_admit(all_free)) return;
  const double now = now_seconds();
  while (!queue_.empty()) {
    const auto free = std::find(slots_.begin(), slots_.end(), nullptr);
    if (free == slots_.end()) break;
    const int64_t s = free - slots_.begin();
    Live& l = *queue_.front();
    if (paged() && !admit_paged(l, s)) break;
    if (!paged()) decoder_.reset_sequence(s);
    std::unique_ptr<Live> live = std::move(queue_.front());
    queue_.pop_front();
    const ServeRequest& r = live->request;
    Sampler& sampler = samplers_[s];
    sampler.restart(r.temperature, r.top_p, live->sampler_state != 0 ? live->sampler_state : r.seed, r.sampling);
    // The penalties' counts: the prompt, and what a preempted request generated before.
    sampler.begin(r.prompt.data(), int64_t(r.prompt.size()));
    for (size_t t = r.prompt.size(); t < live->tokens.size(); ++t) sampler.count(live->tokens[t]);
    live->admission = ++admissions_;
    if (!live->admitted_before) {
      live->admitted_before = true;
      live->stats.admitted = now;
      live->stats.cached_tokens = live->prompt_done;
      metrics_.prompt_tokens_cached += uint64_t(live->prompt_done);
      if (live->request.on_admit) live->request.on_admit(live->stats);
    }
    slots_[s] = std::move(live);
  }
  metrics_.queue_depth = static_cast<int64_t>(queue_.size());
}

// Releases live's blocks last first, so that its cached blocks are evicted last first (a prefix is
// found from its first block on, and one that lost its first block is lost whole), and forgets them.
void Scheduler::drop_blocks(Live& live) {
  for (auto b = live.blocks.rbegin(); b != live.blocks.rend(); ++b) blocks_->release(*b);
  live.blocks.clear();
  live.n_remembered = 0;
  live.key = BlockPool::root(live.request.cache_scope);
}

// Gives `live` the blocks of its whole input in sequence `slot`: the cached ones its tokens begin
// with, a copy of a partly matching one, and new ones for the rest. False (nothing held) when they
// do not fit, or when a running prefill will compute some of them.
bool Scheduler::admit_paged(Live& live, int64_t slot) {
  BlockPool& pool = *blocks_;
  int32_t copy_src = -1;
  int64_t copy_rows = 0;
  int64_t cached = cached_prefix(live, &copy_src, &copy_rows);
  const int64_t needed = KvCache::blocks_for(live.n_input, pool.block_size()) - int64_t(live.blocks.size());
  // A cached block to copy is held while its copy is allocated (then released), so the copy needs
  // a second block free or cached at that moment; without one, the rows are computed instead.
  if (copy_src >= 0 && pool.refs(copy_src) == 0 && pool.available_blocks() < 2) copy_src = -1;
  if (waits_for_prefill(live, cached) || pool.available_blocks() < needed) {
    drop_blocks(live);
    return false;
  }
  if (copy_src >= 0) {
    pool.hold(copy_src);  // not evicted by the allocation of its copy
    const int32_t copy = pool.allocate();
    decoder_.copy_block(copy, copy_src);
    pool.release(copy_src);
    live.blocks.push_back(copy);
    cached += copy_rows;
  }
  while (int64_t(live.blocks.size()) < KvCache::blocks_for(live.n_input, pool.block_size()))
    live.blocks.push_back(pool.allocate());
  decoder_.set_blocks(slot, live.blocks.data(), int64_t(live.blocks.size()), cached);
  live.prompt_done = cached;
  return true;
}

// Holds the cached full blocks live's input begins with (short of its last token, whose logits are
// wanted) and returns the positions they hold; *copy_src and *copy_rows name a block whose first
// rows match the tokens that follow (-1, 0: none). Nothing without prefix caching.
int64_t Scheduler::cached_prefix(Live& live, int32_t* copy_src, int64_t* copy_rows) {
  BlockPool& pool = *blocks_;
  const int64_t bs = pool.block_size(), limit = live.n_input - 1;
  int64_t done = 0;
  while (caching() && !live.scores_prompt() && done < limit) {
    const int32_t* next = live.tokens.data() + done;
    const BlockPool::Match m = pool.longest_child(live.key, next, std::min(bs, limit - done));
    if (m.block < 0) break;
    if (m.n_equal < bs) {
      *copy_src = m.block;
      *copy_rows = m.n_equal;
      break;
    }
    pool.hold(m.block);
    live.blocks.push_back(m.block);
    live.key = BlockPool::key(live.key, next, bs);
    ++live.n_remembered;
    done += bs;
  }
  return done;
}

// Whether a running request of live's scope, still prefilling, will compute a full block of
// live's input that the cache does not hold yet (past the `cached` positions): then live waits a
// step for it.
bool Scheduler::waits_for_prefill(const Live& live, int64_t cached) const {
  if (!caching() || live.scores_prompt()) return false;
  const int64_t bs = blocks_->block_size(), limit = live.n_input - 1;
  for (const auto& slot : slots_) {
    if (slot == nullptr || slot->prompt_done >= slot->n_input) continue;
    if (slot->request.cache_scope != live.request.cache_scope) continue;
    const int64_t n = std::min(limit, slot->n_input);
    int64_t equal = 0;
    while (equal < n && live.tokens[size_t(equal)] == slot->tokens[size_t(equal)]) ++equal;
    if (equal / bs > cached / bs) return true;
  }
  return false;
}

bool Scheduler::caching() const {
  return options_.prompt_cache && options_.policy == SchedulerOptions::Policy::continuous;
}

// Releases the blocks of slot's request; with prefix caching its last, partly filled block is
// remembered first, so that a request that continues it copies it rather than recomputing it.
void Scheduler::release_blocks(int64_t slot) {
  Live& l = *slots_[slot];
  const int64_t bs = blocks_->block_size(), held = decoder_.position(slot);
  const int64_t tail = held - l.n_remembered * bs;
  if (caching() && tail > 0 && tail < bs && int64_t(l.blocks.size()) > l.n_remembered &&
      !blocks_->remembered(l.blocks[size_t(l.n_remembered)]))
    blocks_->remember(l.blocks[size_t(l.n_remembered)], l.key, l.tokens.data() + l.n_remembered * bs, tail);
  drop_blocks(l);
  decoder_.set_blocks(slot, nullptr, 0, 0);
}

// Remembers every block that the last pass filled, by its tokens (prefix caching).
void Scheduler::remember_full_blocks() {
  if (!caching()) return;
  const int64_t bs = blocks_->block_size();
  for (const Decoder::Chunk& c : chunks_) {
    Live* l = slots_[c.seq].get();
    if (l == nullptr) continue;
    while ((l->n_remembered + 1) * bs <= decoder_.position(c.seq)) {
      const int32_t* tokens = l->tokens.data() + l->n_remembered * bs;
      const int32_t block = l->blocks[size_t(l->n_remembered)];
      if (!blocks_->remembered(block)) blocks_->remember(block, l->key, tokens, bs);
      l->key = BlockPool::key(l->key, tokens, bs);
      ++l->n_remembered;
    }
  }
}

// The running request admitted last, or -1.
int64_t Scheduler::newest_running() const {
  int64_t newest = -1;
  for (int64_t s = 0; s < options_.slots; ++s)
    if (slots_[s] && (newest < 0 || slots_[s]->admission > slots_[newest]->admission)) newest = s;
  return newest;
}

// Frees slot's blocks and sends its request back to the front of the queue, to recompute its
// prompt and the tokens it has generated (the last of them, not yet in the cache, included).
void Scheduler::preempt(int64_t slot) {
  release_blocks(slot);
  std::unique_ptr<Live> live = std::move(slots_[slot]);
  live->sampler_state = samplers_[slot].state();
  live->n_input = int64_t(live->tokens.size());
  live->prompt_done = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.push_front(std::move(live));
  ++metrics_.preemptions;
  metrics_.queue_depth = static_cast<int64_t>(queue_.size());
}

// Every generating request whose next position starts a block gets one, the oldest first; when
// none is left the newest running request is preempted (perhaps the one asking). Returns whether
// a request was preempted.
bool Scheduler::grow_decoding() {
  bool preempted = false;
  const int64_t bs = blocks_->block_size();
  for (;;) {
    int64_t oldest = -1;  // the oldest generating request without a block for its next position
    for (int64_t s = 0; s < options_.slots; ++s) {
      const Live* l = slots_[s].get();
      if (l == nullptr || l->prompt_done < l->n_input || decoder_.position(s) < int64_t(l->blocks.size()) * bs) continue;
      if (oldest < 0 || l->admission < slots_[oldest]->admission) oldest = s;
    }
    if (oldest < 0) return preempted;
    const int32_t block = blocks_->allocate();
    if (block < 0) {
      preempt(newest_running());
      preempted = true;
      continue;
    }
    Live& l = *slots_[oldest];
    l.blocks.push_back(block);
    decoder_.set_blocks(oldest, l.blocks.data(), int64_t(l.blocks.size()), decoder_.position(oldest));
  }
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
// prompt chunks, oldest first, up to the step's budget (a prompt that is scored takes at most the
// logits rows left beyond one per slot). Returns false when there are none.
bool Scheduler::build_rows() {
  chunks_.clear();
  logit_slots_.clear();
  logit_scores_.clear();
  int64_t budget = options_.pass_rows;
  int64_t extra_logits = decoder_.logit_rows() - options_.slots;  // each chunk's first row has one of its own
  last_decode_rows_ = last_prompt_rows_ = 0;
  for (int64_t s = 0; s < options_.slots; ++s) {
    Live* l = slots_[s].get();
    if (l == nullptr || l->prompt_done < l->n_input) continue;
    chunks_.push_back({s, &l->last, 1, true});
    --budget;
    ++last_decode_rows_;
  }
  if (static_batches_) budget -= static_batches_->add_finished_rows(decoder_, chunks_);
  for (int64_t s = oldest_prefilling(); s >= 0 && budget > 0; s = oldest_prefilling()) {
    Live* l = slots_[s].get();
    const int64_t left = l->n_input - l->prompt_done;
    const bool scored = l->scores_prompt();
    const int64_t n = std::min({left, budget, scored ? 1 + extra_logits : left});
    chunks_.push_back({s, l->tokens.data() + l->prompt_done, n, n == left, scored});
    if (scored) extra_logits -= n - 1;
    l->prompt_done += n;
    budget -= n;
    last_prompt_rows_ += n;
  }
  // The logits rows follow the chunks that asked for them, in order.
  // A scored chunk's rows score the token after each; its last row samples if the prompt ends there.
  for (const auto& c : chunks_) {
    for (int64_t i = 0; c.every_row && i < c.n - (c.logits ? 1 : 0); ++i) {
      logit_slots_.push_back(c.seq);
      logit_scores_.push_back(c.tokens - slots_[c.seq]->tokens.data() + i + 1);
    }
    if (c.logits) {
      logit_slots_.push_back(c.seq);
      logit_scores_.push_back(-1);
    }
  }
  return !chunks_.empty();
}

// The slot whose prompt is still being read and has no chunk in this step yet, admitted first
// (ties by request id); -1 if none.
int64_t Scheduler::oldest_prefilling() const {
  int64_t oldest = -1;
  for (int64_t s = 0; s < options_.slots; ++s) {
    const Live* l = slots_[s].get();
    if (l == nullptr || l->prompt_done >= l->n_input) continue;
    if (std::any_of(chunks_.begin(), chunks_.end(), [&](const Decoder::Chunk& c) { return c.seq == s; })) continue;
    const Live* o = oldest < 0 ? nullptr : slots_[oldest].get();
    if (o == nullptr || l->stats.admitted < o->stats.admitted ||
        (l->stats.admitted == o->stats.admitted && l->stats.id < o->stats.id))
      oldest = s;
  }
  return oldest;
}

namespace {
// Sets the logits of the tokens outside `mask` (TokenConstraint::mask_words(n) words) to -infinity;
// returns whether the mask allows any token.
bool mask_logits(const uint32_t* mask, int64_t n, float* logits) {
  bool any = false;
  for (int64_t w = 0; w < TokenConstraint::mask_words(n); ++w) {
    const uint32_t word = mask[w];
    any = any || word != 0;
    if (word == ~0u) continue;
    const int64_t end = std::min(n, (w + 1) * 32);
    for (int64_t t = w * 32; t < end; ++t)
      if (!((word >> (t % 32)) & 1u)) logits[t] = -std::numeric_limits<float>::infinity();
  }
  return any;
}
}  // namespace

bool Scheduler::stops(const ServeRequest& r, int32_t token) const {
  return (r.stop_at_eos && is_stop_token(stop_ids_, token)) ||
         std::find(r.stop_tokens.begin(), r.stop_tokens.end(), token) != r.stop_tokens.end();
}

// A token from `row` (vocab_ logits, processed) that l's constraint allows, or -1 when it allows
// none. A stop token is not given to the constraint: it ends the answer. XGrammar's mask can allow
// a token its matcher then refuses (docs/serving.md has a case); such a token is struck from the
// masked row and the choice made again, at most kMaxRefusedTokens times.
int32_t Scheduler::choose_constrained(Live& l, Sampler& sampler, float* row) {
  constexpr float kStruck = -std::numeric_limits<float>::infinity();
  const double start = now_seconds();
  const bool allowed = mask_logits(l.mask.data(), vocab_, row);
  step_mask_seconds_ += now_seconds() - start;
  ++step_masked_tokens_;
  if (!allowed) return -1;
  // A sampled choice rewrites the row (temperature, softmax): it starts again from a copy. The
  // greedy one only reads it.
  float* masked = sampler.greedy() ? row : masked_row_.data();
  if (!sampler.greedy()) std::copy(row, row + vocab_, masked);
  for (int refused = 0;; ++refused) {
    const int32_t token = sampler.choose(row);
    if (stops(l.request, token) || l.request.constraint->accept(token)) return token;
    ++step_refused_tokens_;
    if (refused == kMaxRefusedTokens) return -1;
    masked[token] = kStruck;
    if (masked[sample_argmax(masked, vocab_)] == kStruck) return -1;  // nothing allowed is left
    if (masked != row) std::copy(masked, masked + vocab_, row);
  }
}

// The masks of the constrained requests that sample in this step. The forward pass runs on a
// device meanwhile (forward_chunks returns before it ends there); on the CPU it has ended.
void Scheduler::fill_masks() {
  const double start = now_seconds();
  bool any = false;
  for (size_t i = 0; i < logit_slots_.size(); ++i) {
    Live* l = slots_[logit_slots_[i]].get();
    if (l == nullptr || !l->request.constraint || logit_scores_[i] >= 0) continue;
    l->request.constraint->fill_mask(l->mask.data());
    any = true;
  }
  if (any) step_mask_seconds_ += now_seconds() - start;
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
    if (logit_scores_[i] >= 0) {
      score_prompt_row(*l, i, logit_scores_[i]);
      continue;
    }
    if (l->request.max_tokens == 0) {  // the prompt's logprobs were all it asked for
      retire(s, FinishReason::length, now);
      continue;
    }
    Sampler& sampler = samplers_[s];
    TokenConstraint* constraint = l->request.constraint.get();
    // Logprobs come from the raw row, before the penalties, the bias and the mask change it.
    if (l->request.top_logprobs >= 0) row_logprobs_.read(decoder_.logits_row(i), l->request.top_logprobs);
    int32_t token = 0;
    if (sampler.greedy() && !sampler.options().processes_logits() && constraint == nullptr) {
      token = argmax_[i];
    } else {
      float* row = decoder_.logits_row(i);
      sampler.process(row);  // the penalties and logit_bias
      token = constraint != nullptr ? choose_constrained(*l, sampler, row) : sampler.choose(row);
      if (token < 0) {  // a grammar with no way on: the answer ends here
        retire(s, FinishReason::stop, now);
        continue;
      }
    }
    const ServeRequest& r = l->request;
    if (stops(r, token)) {
      retire(s, FinishReason::stop, now);
      continue;
    }
    if (l->stats.completion_tokens == 0) l->stats.first_token = now;
    ++l->stats.completion_tokens;
    ++generated;
    l->last = token;
    l->tokens.push_back(token);
    sampler.count(token);
    if (r.top_logprobs >= 0 && r.on_logprobs) r.on_logprobs(row_logprobs_.of(token));
    const bool more = r.on_token ? r.on_token(token) : true;
    if (!more) retire(s, FinishReason::stop, now);
    else if (l->stats.completion_tokens >= r.max_tokens) retire(s, FinishReason::length, now);
  }
  return generated;
}

// Gives live the logprobs of its prompt token `index` from logits row `row` (the row of the token
// before it), unless they were given before a preemption.
void Scheduler::score_prompt_row(Live& live, int64_t row, int64_t index) {
  if (index != live.prompt_scored || index >= static_cast<int64_t>(live.request.prompt.size())) return;
  row_logprobs_.read(decoder_.logits_row(row), live.request.top_logprobs);
  ++live.prompt_scored;
  if (live.request.on_prompt_logprobs)
    live.request.on_prompt_logprobs(index, row_logprobs_.of(live.tokens[size_t(index)]));
}

void Scheduler::update_gauges_locked() {
  metrics_.busy_slots = 0;
  metrics_.kv_positions = 0;
  for (int64_t s = 0; s < options_.slots; ++s) {
    if (slots_[s] == nullptr) continue;
    ++metrics_.busy_slots;
    metrics_.kv_positions += decoder_.position(s);
  }
  if (blocks_) {
    metrics_.kv_blocks_total = blocks_->n_blocks();
    metrics_.kv_blocks_used = blocks_->used_blocks();
    metrics_.kv_blocks_cached = blocks_->cached_blocks();
  }
}

bool Scheduler::step() {
  take_cancellations();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    admit_locked();
  }
  if (paged() && grow_decoding()) {
    std::lock_guard<std::mutex> lock(mutex_);
    admit_locked();  // a preempted request may fit a free slot at once, its first blocks still cached
  }
  if (!build_rows()) {
    std::lock_guard<std::mutex> lock(mutex_);
    update_gauges_locked();
    return false;
  }
  decoder_.forward_chunks(chunks_);
  fill_masks();
  remember_full_blocks();
  const int64_t generated = sample_and_retire();
  std::lock_guard<std::mutex> lock(mutex_);
  metrics_.masked_tokens += step_masked_tokens_;
  metrics_.refused_tokens += step_refused_tokens_;
  metrics_.mask_seconds += step_mask_seconds_;
  step_masked_tokens_ = 0;
  step_refused_tokens_ = 0;
  step_mask_seconds_ = 0;
  metrics_.prompt_tokens += uint64_t(last_prompt_rows_);
  metrics_.generated_tokens += uint64_t(generated);
  ++metrics_.steps;
  // Slots freed by this step go to waiting requests now, so their prompts join the next step.
  admit_locked();
  update_gauges_locked();
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
