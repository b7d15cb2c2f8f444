// Continuous batching: requests that arrive at any time, with their own prompt, length and
// sampling, share one model, a step at a time.
//
// The scheduler owns a decoder of S slots (S sequences of the KV cache, --slots) and a queue of
// requests. Every step it builds one forward pass from
//   - one decode row for every slot whose request is generating (the token it sampled last), and
//   - prompt rows of requests still prefilling, oldest first, up to a budget of pass_rows rows
//     in all (chunked prefill: a long prompt is spread over several steps, so that it never stalls
//     the sequences that are decoding),
// then samples a token for every slot whose row asked for logits (a decode row, or the last row of
// a prompt), with that request's own sampler, and retires the requests that produced a stop token,
// reached max_tokens or were cancelled. A retired request's slot is given to the next waiting
// request at once, so its prompt rows join the very next step.
//
// With Policy::static_batches the same machinery admits requests only when every slot is free and
// keeps finished rows computing until the batch ends (engine/static_batches.h).
//
// Threads: submit(), cancel() and metrics() may be called from any thread; step() and run() from
// one thread only (the engine's). Callbacks run on the engine's thread and must be quick.
// Nothing is allocated by a step, from the pool or the heap (tests/heap/test_decode_heap.cpp): the
// decoder, the row lists, the block pool and every slot's sampler are sized when the scheduler is
// made, an admitted request restarts its slot's sampler, and its token and block lists were
// reserved by submit(), on the caller's thread. The exception is a preemption, whose request goes
// back into the queue (a std::deque, which may allocate a chunk for it).
//
// The KV cache is a pool of blocks (engine/block_pool.h), not a context per slot. A request is
// admitted when a slot (a sequence of the decoder; --slots is the most that run at once) is free
// and the blocks of its whole prompt, less those it finds cached, are free or cached; it is given
// them at once, so a prompt never waits for memory halfway. A generating request takes a block
// when its positions cross into a new one. When none is left, the request admitted last is
// preempted: its blocks are released, and it goes back to the front of the queue with its prompt
// and every token it has generated as the prompt to recompute, its sampler's state kept, so it
// goes on with the tokens it would have made. Its blocks stay cached, released last first so that
// the pool evicts its last blocks first: those of its prefix that survive are not recomputed. A request whose prompt and max_tokens need more blocks than the pool has
// is refused at submit().
//
// Prefix caching (SchedulerOptions::prompt_cache, on by default, as vLLM's automatic prefix
// caching and llama-server's cache_prompt): every full block is remembered by its tokens and the
// key of all the tokens before it, and a finished request's last, partly filled block too. A new
// request holds the cached full blocks its prompt begins with (shared: stored and computed once,
// however many requests use them) and copies the first rows of a partly matching block into a
// block of its own (copy on write: a shared block is never written). Blocks nobody holds stay
// cached until a block is needed, and the least recently released goes first. A conversation
// that sends its whole history every turn thus prefills only the new turn; at least the prompt's
// last token is always computed again, since its logits give the first new token. A request for its
// prompt's logprobs (ServeRequest::prompt_logprobs) finds nothing cached: it computes every row. A request whose
// prompt shares whole blocks with one still prefilling waits for them to be computed rather than
// computing them again (32 requests with one system prompt prefill it once). All of this happens
// within a request's cache scope (ServeRequest::cache_scope) only: a request never holds, copies
// or waits for a block of another scope, so what it finds cached, and whether it waits for a
// prefill, says nothing about the prompts of other scopes.
//
// Determinism: each request samples with its own generator seeded by its seed, so the tokens it
// gets do not depend on what else runs. Its logits can differ in the last bits between a step of
// one row and a step of many (the CPU and GPU kernels choose their summation order by the number
// of rows), which changes a token only at a near-tie.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/block_pool.h"
#include "engine/decoder.h"
#include "engine/logprobs.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/static_batches.h"
#include "engine/token_constraint.h"

namespace minfer {

enum class FinishReason { stop, length, cancelled };

// What a caller learns about a request once it ends. Times are steady-clock seconds.
struct RequestStats {
  uint64_t id = 0;
  FinishReason reason = FinishReason::stop;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // tokens delivered (a stop token is not delivered)
  // Prompt tokens whose keys and values were cached at its first admission (a request preempted
  // later may compute them after all, and they stay counted here and in prompt_tokens_cached).
  // Exact, rows copied from a partly matching block included: serve tells a client only the
  // whole blocks of it (serve/serve_api.h, client_cached_tokens).
  int64_t cached_tokens = 0;
  double submitted = 0, admitted = 0, first_token = 0, finished = 0;
  double ttft() const { return first_token - submitted; }  // time to first token
  // Time per output token after the first (0 with fewer than two tokens).
  double tpot() const { return completion_tokens > 1 ? (finished - first_token) / double(completion_tokens - 1) : 0.0; }
};

struct ServeRequest {
  std::vector<int32_t> prompt;  // at least one token
  int64_t max_tokens = 16;      // tokens to generate at most (>= 1; >= 0 with prompt_logprobs)
  float temperature = 1.0f;     // 0: greedy
  float top_p = 1.0f;
  SamplingOptions sampling;  // top_k, min_p, penalties (over the generated tokens), logit_bias
  uint64_t seed = 1;
  bool stop_at_eos = true;           // end at the model's stop tokens (ModelInfo::stop_ids)
  std::vector<int32_t> stop_tokens;  // more tokens that end the request (not delivered)
  // The grammar its tokens keep to (structured outputs): each token is sampled from the logits with
  // every token outside the constraint's mask at -infinity, then accepted by it. Null: none.
  std::shared_ptr<TokenConstraint> constraint;
  // The prefix cache's tenant: the request finds, shares and copies only blocks that requests of
  // the same scope computed (BlockPool::root). 0: the scope every request shares by default.
  uint64_t cache_scope = 0;
  // Each generated token, in order, on the engine's thread. Returning false ends the request
  // after this token with FinishReason::stop (a stop string was completed, say).
  std::function<bool(int32_t token)> on_token;
  // With top_logprobs in [0, 20] (RowLogprobs::kMaxTopLogprobs): each delivered token's logprob and
  // the top_logprobs most likely tokens' (engine/logprobs.h), from the raw logits row, on the engine's
  // thread just before on_token. -1: none.
  int top_logprobs = -1;
  std::function<void(const SampledLogprobs&)> on_logprobs;
  // With top_logprobs >= 0, the prompt's logprobs too (OpenAI's legacy `echo`, lm-eval's
  // loglikelihood): on_prompt_logprobs(i, entries) for each prompt token i = 1 .. P - 1 in order, its
  // logprob given the tokens before it and the top_logprobs most likely tokens' there, on the
  // engine's thread. Such a prompt is prefilled in chunks of at most 1 + kPromptLogitsRows rows (the
  // logits rows a pass has for it) and computed whole: the prefix cache is not searched for it.
  // max_tokens may then be 0: the request ends after its prompt with FinishReason::length.
  bool prompt_logprobs = false;
  std::function<void(int64_t index, const SampledLogprobs&)> on_prompt_logprobs;
  // Once, on the engine's thread, when the request ends for any reason.
  std::function<void(const RequestStats&)> on_finish;
  // Once, when the request gets its slot (stats.cached_tokens is known then), on the engine's
  // thread with the scheduler's lock held: it must be quick and must not call the scheduler.
  std::function<void(const RequestStats&)> on_admit;
};

// What submit() throws when the queue is full: a refusal that a later retry can get past (an HTTP
// server answers 429 to it, and 400 to every other refusal).
class QueueFullError : public Error {
 public:
  using Error::Error;
};

struct SchedulerOptions {
  enum class Policy { continuous, static_batches };
  int64_t slots = 8;          // sequences decoded together
  int64_t n_ctx = 0;          // a slot's context (--ctx), at most the model's; 0: the model's
  int64_t pass_rows = 256;  // rows per forward pass at most (decode rows + prompt chunks), >= slots
  int64_t max_queue = 256;    // requests waiting for a slot; submit() refuses more (serve --max-queue)
  std::optional<DType> kv_dtype;  // the KV cache's type; unset: the decoder's default
  // The KV cache's blocks (serve --kv-cache-mib); 0: as many as `slots` whole contexts take.
  // Static batches always keep a whole context per slot.
  int64_t kv_blocks = 0;
  int64_t kv_block_size = KvCache::kDefaultBlockSize;  // positions per block
  Policy policy = Policy::continuous;
  bool prompt_cache = true;  // prefix caching of blocks (continuous policy only)
};

// Counters and gauges for /metrics and the benches (a consistent snapshot).
struct SchedulerMetrics {
  uint64_t requests_submitted = 0, requests_finished = 0, requests_cancelled = 0, requests_refused = 0;
  uint64_t prompt_tokens = 0, generated_tokens = 0, steps = 0;
  uint64_t prompt_tokens_cached = 0;  // prompt tokens served from cached blocks, not prefilled
  uint64_t preemptions = 0;           // requests preempted for want of blocks
  int64_t queue_depth = 0, busy_slots = 0;  // requests waiting, and running
  int64_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_cached = 0;  // BlockPool's counts
  int64_t kv_positions = 0;  // positions whose keys and values the running requests hold
  // Constrained tokens (ServeRequest::constraint) sampled, and the time spent filling and applying
  // their masks (on the engine's thread; filled while a device's forward pass runs).
  uint64_t masked_tokens = 0;
  double mask_seconds = 0;
  // Tokens a constraint refused after its mask allowed them (Scheduler::choose_constrained).
  uint64_t refused_tokens = 0;
  // Histograms: counts per upper bound (seconds), cumulative as Prometheus wants them, and sums.
  static constexpr int kBuckets = 14;
  static const double kBounds[kBuckets];  // 1 ms .. 60 s; the last bucket is +Inf
  uint64_t ttft_counts[kBuckets + 1] = {}, tpot_counts[kBuckets + 1] = {};
  double ttft_sum = 0, tpot_sum = 0;
  uint64_t ttft_n = 0, tpot_n = 0;
};

// Logits rows a forward pass holds beyond one per slot, for the prompt rows of requests that ask
// for their prompt's logprobs (ServeRequest::prompt_logprobs): 32 x vocab floats, 19.4 MB for
// Qwen's 151,936 tokens (on the device and on the host), whatever the slots.
constexpr int64_t kPromptLogitsRows = 32;

// How many times a constrained sample is made again after its constraint refused a token its
// mask allowed; one refusal more ends the answer (Scheduler::choose_constrained).
constexpr int kMaxRefusedTokens = 16;

class Scheduler {
 public:
  Scheduler(Model& model, const SchedulerOptions& options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  const SchedulerOptions& options() const { return options_; }
  int64_t n_ctx() const { return decoder_.n_ctx(); }
  const Decoder& decoder() const { return decoder_; }
  // For Decoder::lead and follow (tensor parallelism), before run().
  Decoder& decoder() { return decoder_; }

  // Queues a request and returns its id. Throws Error, with nothing queued, for a request that no
  // waiting would let run: an empty prompt, a token outside the vocabulary, max_tokens < 1 (< 0 with
  // prompt_logprobs), a prompt plus max_tokens that needs more positions than a slot has ("prompt
  // of P tokens + N new tokens needs ... > context C") or, with a block pool, more blocks than the
  // pool has, temperature < 0, top_p outside (0, 1], seed 0, a SamplingOptions setting out of its
  // range (check_sampling_options), top_logprobs outside [-1, 20], or prompt_logprobs without
  // top_logprobs. Throws QueueFullError (an Error) when max_queue requests are waiting, which a
  // later try may pass. Both count in requests_refused. A preempted request goes back to the
  // front of the queue even when it is full.
  uint64_t submit(ServeRequest request);
  // Ends a request (queued or running) with FinishReason::cancelled at the start of the next step;
  // an id that has finished already is ignored.
  void cancel(uint64_t id);
  // Ends every request, queued or running, with FinishReason::cancelled (shutdown).
  void cancel_all();

  // One step: admit, run one forward pass over decode rows and prompt chunks, sample, retire.
  // Returns false (and does nothing) when there is no request at all.
  bool step();
  // Steps until stop is set and no work is left (or stop is set and cancel_all() was called),
  // sleeping while there is nothing to do.
  void run(const std::atomic<bool>& stop);
  // Wakes run() (after setting its stop flag).
  // note: it takes the scheduler's lock before it notifies. Without it a flag set and a notify
  // sent while run() stood between its look at the flag and its wait were lost, and run() slept
  // for good (seen as a `serve` that never exited after SIGTERM).
  void notify();
  // For tests: called by run() with the lock held, after it found nothing to do and before it
  // sleeps, so a test can hold the engine in the window that notify() must not miss.
  void set_before_sleep_hook(std::function<void()> hook) { before_sleep_ = std::move(hook); }

  SchedulerMetrics metrics() const;
  // The rows of the last step: decode rows and prompt rows (for the lessons and tests).
  int64_t last_step_decode_rows() const { return last_decode_rows_; }
  int64_t last_step_prompt_rows() const { return last_prompt_rows_; }

 private:
  struct Live;  // a request with its slot, sampler and progress
  void admit_locked();
  bool admit_paged(Live& live, int64_t slot);
  int64_t cached_prefix(Live& live, int32_t* copy_src, int64_t* copy_rows);
  bool waits_for_prefill(const Live& live, int64_t cached) const;
  bool caching() const;
  bool paged() const { return !static_batches_; }
  void take_cancellations();
  bool grow_decoding();
  int64_t newest_running() const;
  void preempt(int64_t slot);
  void release_blocks(int64_t slot);
  void drop_blocks(Live& live);
  void remember_full_blocks();
  bool build_rows();
  int64_t oldest_prefilling() const;
  void fill_masks();
  int64_t sample_and_retire();
  bool stops(const ServeRequest& r, int32_t token) const;
  int32_t choose_constrained(Live& l, Sampler& sampler, float* row);
  void score_prompt_row(Live& live, int64_t row, int64_t index);
  void retire(int64_t slot, FinishReason reason, double now);
  void record_finish_locked(const RequestStats& stats);
  void update_gauges_locked();

  SchedulerOptions options_;
  Decoder decoder_;
  int64_t vocab_;
  std::vector<int32_t> stop_ids_;

  mutable std::mutex mutex_;  // guards queue_, cancels_, metrics_, next_id_
  std::condition_variable wake_;
  std::function<void()> before_sleep_;  // set_before_sleep_hook
  std::deque<std::unique_ptr<Live>> queue_;
  std::vector<uint64_t> cancels_;
  bool cancel_all_ = false;
  uint64_t next_id_ = 1;
  SchedulerMetrics metrics_;

  std::vector<std::unique_ptr<Live>> slots_;  // engine thread only; nullptr = free
  std::optional<StaticBatches> static_batches_;  // set under Policy::static_batches
  std::vector<Sampler> samplers_;             // one per slot, reseeded at admission
  std::optional<BlockPool> blocks_;           // the cache's blocks, continuous policy only
  uint64_t admissions_ = 0;                   // admissions so far: the newest runs last
  std::vector<Decoder::Chunk> chunks_;        // the step's rows, reserved once
  std::vector<int64_t> logit_slots_;          // the slot of each logits row of the step
  // For each logits row: the index of the prompt token it scores (prompt_logprobs), or -1 if it samples.
  std::vector<int64_t> logit_scores_;
  std::vector<int32_t> argmax_;
  RowLogprobs row_logprobs_;  // the row of a request that asks for logprobs, before it is changed
  std::vector<float> masked_row_;  // a sampled constrained row, masked, before choose() rewrites it
  std::vector<std::unique_ptr<Live>> cancelled_queued_;  // a step's cancelled queued requests
  int64_t last_decode_rows_ = 0, last_prompt_rows_ = 0;
  uint64_t step_masked_tokens_ = 0;  // this step's constrained tokens, refusals and mask time (metrics_)
  uint64_t step_refused_tokens_ = 0;
  double step_mask_seconds_ = 0;
};

}  // namespace minfer
