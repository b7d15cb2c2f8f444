#include "core/threads.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>

#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MINFER_CPU_RELAX() _mm_pause()
#else
#define MINFER_CPU_RELAX() std::this_thread::yield()
#endif

namespace minfer {

namespace {
uint64_t pack(uint32_t generation, uint32_t n_tasks, uint32_t next) {
  return (static_cast<uint64_t>(generation) << 32) | (static_cast<uint64_t>(n_tasks) << 16) | next;
}
}  // namespace

int ThreadPool::hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int n_threads, int spin_us)
    : n_threads_(n_threads <= 0 ? hardware_threads() : n_threads), spin_us_(std::max(0, spin_us)) {
  MINFER_CHECK(n_threads_ <= 1024, "thread count ", n_threads_, " exceeds 1024");
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

// Claims tasks of `generation` until none is left. Returns whether any task ran.
bool ThreadPool::claim_and_run(uint32_t generation) {
  bool ran = false;
  uint64_t word = task_word_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(word >> 32) != generation) return ran;
    const uint32_t n_tasks = static_cast<uint32_t>(word >> 16) & 0xffffu, task = static_cast<uint32_t>(word) & 0xffffu;
    if (task >= n_tasks) return ran;
    if (!task_word_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel)) continue;
    // The round cannot end before this task does, so task_ still holds this round's function.
    (*task_.load(std::memory_order_acquire))(static_cast<int>(task));
    done_tasks_.fetch_add(1, std::memory_order_acq_rel);
    ran = true;
    word = task_word_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  for (;;) {
    uint32_t generation = generation_.load(std::memory_order_acquire);
    if (generation == seen && !stop_.load(std::memory_order_acquire)) {
      const int spin_us = contended_.load(std::memory_order_relaxed) ? 0 : spin_us_;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
      int spins = 0;
      while ((generation = generation_.load(std::memory_order_acquire)) == seen &&
             !stop_.load(std::memory_order_acquire)) {
        MINFER_CPU_RELAX();
        if (++spins % 64 == 0 && std::chrono::steady_clock::now() > deadline) {
          std::unique_lock<std::mutex> lock(mutex_);
          sleepers_.fetch_add(1);
          wake_.wait(lock, [&] {
            return generation_.load(std::memory_order_acquire) != seen || stop_.load();
          });
          sleepers_.fetch_sub(1);
        }
      }
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation;
    claim_and_run(generation);
  }
}

void ThreadPool::watch_contention() {
  if (spin_us_ == 0 || ++runs_since_check_ < 64) return;
  runs_since_check_ = 0;
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0) return;
  // An idle machine preempts the process now and then (the hypervisor, kernel threads), a
  // competing busy process many times per check (bench/results/NOTES.md). Three or more
  // preemptions within 64 regions (a millisecond or two of decode) mean another process wants
  // these cores. Sleeping workers are preempted less, so once contended the pool stays so
  // while any preemption is seen, and spins again only after 16 checks without one.
  const long preemptions = usage.ru_nivcsw - last_involuntary_switches_;
  if (preemptions >= 3 || (preemptions >= 1 && quiet_checks_left_ > 0)) quiet_checks_left_ = 16;
  else if (quiet_checks_left_ > 0) --quiet_checks_left_;
  contended_.store(quiet_checks_left_ > 0, std::memory_order_relaxed);
  last_involuntary_switches_ = usage.ru_nivcsw;
}

void ThreadPool::run(int n_tasks, FunctionRef<void(int)> task) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    for (int i = 0; i < n_tasks; ++i) task(i);
    return;
  }
  // A round holds at most kMaxTasksPerRound tasks (16 bits of the task word).
  for (int first = 0; first < n_tasks; first += kMaxTasksPerRound) {
    const int count = std::min(kMaxTasksPerRound, n_tasks - first);
    if (first == 0 && count == n_tasks) {
      run_round(count, task);
    } else {
      run_round(count, [&](int i) { task(first + i); });
    }
  }
}

void ThreadPool::run_round(int n_tasks, FunctionRef<void(int)> task) {
  watch_contention();
  uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  task_.store(&task, std::memory_order_release);
  done_tasks_.store(0, std::memory_order_relaxed);
  task_word_.store(pack(generation, static_cast<uint32_t>(n_tasks), 0), std::memory_order_release);
  {
    // Publishing under the mutex means a worker that is about to sleep cannot miss the change.
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.store(generation, std::memory_order_release);
  }
  if (sleepers_.load() > 0) wake_.notify_all();
  claim_and_run(generation);
  // Every task is claimed; wait for the ones still running on workers.
  int spins = 0;
  while (done_tasks_.load(std::memory_order_acquire) < n_tasks) {
    MINFER_CPU_RELAX();
    if (++spins % 1024 == 0) std::this_thread::yield();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t units = (n + grain - 1) / grain;
  // A few chunks per thread lets the faster threads take over the share of a slow one.
  int64_t chunks = std::min<int64_t>(units, n_threads_ == 1 ? 1 : 8 * n_threads_);
  int64_t units_per_chunk = (units + chunks - 1) / chunks;
  chunks = (units + units_per_chunk - 1) / units_per_chunk;
  run(static_cast<int>(chunks), [&](int c) {
    int64_t begin = c * units_per_chunk * grain;
    int64_t end = std::min(n, begin + units_per_chunk * grain);
    fn(begin, end);
  });
}

}  // namespace minfer
