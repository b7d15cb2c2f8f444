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
// decoder, the row lists and every slot's sampler are sized when the scheduler is made, and an
// admitted request restarts its slot's sampler (the request itself was allocated by submit(), on
// the caller's thread).
//
// Prompt caching (SchedulerOptions::prompt_cache, on by default, as llama-server's cache_prompt):
// a finished request leaves its keys and values in its slot, and the scheduler remembers which
// tokens they are. A new request goes to the free slot it continues (its prompt begins with three
// quarters of the slot's tokens, or three quarters of it are there; else to the slot used least
// recently), which rewinds to the first
// position where they differ (Decoder::rewind; nothing is copied) and prefills only the rest. A conversation that
// sends its whole history every turn thus prefills only the new turn. At least the prompt's last
// token is always computed again, since its logits give the first new token.
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
#include "engine/decoder.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/static_batches.h"

namespace minfer {

enum class FinishReason { stop, length, cancelled };

// What a caller learns about a request once it ends. Times are steady-clock seconds.
struct RequestStats {
  uint64_t id = 0;
  FinishReason reason = FinishReason::stop;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // tokens delivered (a stop token is not delivered)
  int64_t cached_tokens = 0;      // prompt tokens whose keys and values a slot held already
  double submitted = 0, admitted = 0, first_token = 0, finished = 0;
  double ttft() const { return first_token - submitted; }  // time to first token
  // Time per output token after the first (0 with fewer than two tokens).
  double tpot() const { return completion_tokens > 1 ? (finished - first_token) / double(completion_tokens - 1) : 0.0; }
};

struct ServeRequest {
  std::vector<int32_t> prompt;  // at least one token
  int64_t max_tokens = 16;      // tokens to generate at most (>= 1)
  float temperature = 1.0f;     // 0: greedy
  float top_p = 1.0f;
  uint64_t seed = 1;
  bool stop_at_eos = true;           // end at the model's stop tokens (ModelInfo::stop_ids)
  std::vector<int32_t> stop_tokens;  // more tokens that end the request (not delivered)
  // Each generated token, in order, on the engine's thread. Returning false ends the request
  // after this token with FinishReason::stop (a stop string was completed, say).
  std::function<bool(int32_t token)> on_token;
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
  int64_t n_ctx = 0;          // positions per slot; 0: the model's context
  int64_t pass_rows = 256;  // rows per forward pass at most (decode rows + prompt chunks), >= slots
  int64_t max_queue = 256;    // requests waiting for a slot; submit() refuses more (serve --max-queue)
  std::optional<DType> kv_dtype;  // the KV cache's type; unset: the decoder's default
  Policy policy = Policy::continuous;
  bool prompt_cache = true;  // reuse a free slot's cache for a shared prefix (continuous policy only)
};

// Counters and gauges for /metrics and the benches (a consistent snapshot).
struct SchedulerMetrics {
  uint64_t requests_submitted = 0, requests_finished = 0, requests_cancelled = 0, requests_refused = 0;
  uint64_t prompt_tokens = 0, generated_tokens = 0, steps = 0;
  uint64_t prompt_tokens_cached = 0;  // prompt tokens served from a slot's cache, not prefilled
  int64_t queue_depth = 0, busy_slots = 0;
  // Histograms: counts per upper bound (seconds), cumulative as Prometheus wants them, and sums.
  static constexpr int kBuckets = 14;
  static const double kBounds[kBuckets];  // 1 ms .. 60 s; the last bucket is +Inf
  uint64_t ttft_counts[kBuckets + 1] = {}, tpot_counts[kBuckets + 1] = {};
  double ttft_sum = 0, tpot_sum = 0;
  uint64_t ttft_n = 0, tpot_n = 0;
};

class Scheduler {
 public:
  Scheduler(Model& model, const SchedulerOptions& options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  const SchedulerOptions& options() const { return options_; }
  int64_t n_ctx() const { return decoder_.n_ctx(); }
  const Decoder& decoder() const { return decoder_; }

  // Queues a request and returns its id. Throws Error (nothing queued) when it can never run: an
  // empty prompt, a token outside the vocabulary, max_tokens < 1, a prompt plus max_tokens that
  // needs more positions than a slot has ("prompt of P tokens + N new tokens needs ... > context
  // C"), or a full queue (QueueFullError).
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
  int64_t choose_free_slot(const std::vector<int32_t>& prompt, int64_t* reuse) const;
  int64_t shared_prefix(int64_t slot, const std::vector<int32_t>& prompt) const;
  bool caching() const;
  void take_cancellations();
  bool build_rows();
  int64_t oldest_prefilling() const;
  int64_t sample_and_retire();
  void retire(int64_t slot, FinishReason reason, double now);
  void record_finish_locked(const RequestStats& stats);

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
  // The tokens whose keys and values each slot's cache holds (prompt caching), reserved for the
  // whole context once, and the step at which each slot last finished a request.
  std::vector<std::vector<int32_t>> cached_;
  std::vector<uint64_t> last_used_;
  std::vector<Decoder::Chunk> chunks_;        // the step's rows, reserved once
  std::vector<int64_t> logit_slots_;          // the slot of each logits row of the step
  std::vector<int32_t> argmax_;
  std::vector<std::unique_ptr<Live>> cancelled_queued_;  // a step's cancelled queued requests
  int64_t last_decode_rows_ = 0, last_prompt_rows_ = 0;
};

}  // namespace minfer
