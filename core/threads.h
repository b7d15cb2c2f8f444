// A small thread pool for the CPU kernels.
//
// run(n, fn) calls fn(0) .. fn(n-1) across the calling thread and the workers and returns when all
// calls have finished. Tasks are claimed one at a time from a shared counter, so a worker that the
// OS has descheduled simply claims nothing: the others, the caller included, take its share. The
// caller never waits for a worker to wake up, only for tasks that are already running.
//
// note: idle workers spin for `spin_us` microseconds before they sleep on a condition variable,
// but only while the process has the cores to itself. A decode step runs about ten parallel
// regions per layer a few microseconds apart, and waking a sleeping thread each time costs a
// tenth of decode speed on an idle machine. On a machine shared with other work the opposite
// holds: a spinning worker is a runnable thread the scheduler shares the cores with, and decode
// loses far more than that (bench/results/NOTES.md has both measurements). So the pool watches
// its own involuntary context switches (getrusage, every 64 regions): while the scheduler is
// preempting it, workers sleep as soon as they run out of work; when it stops, they spin again.
// spin_us = 0 gives the pure sleeping policy (`minfer bench --spin-us 0`).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace minfer {

// A non-owning reference to a callable; unlike std::function it never allocates.
template <class Signature>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT: implicit by design, like std::function_ref
      : object_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

class ThreadPool {
 public:
  static constexpr int kDefaultSpinMicros = 200;

  // n_threads counts the caller: 1 runs everything inline. 0 means every core.
  explicit ThreadPool(int n_threads = 0, int spin_us = kDefaultSpinMicros);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  int spin_us() const { return spin_us_; }
  static int hardware_threads();

  void run(int n_tasks, FunctionRef<void(int)> task);
  // Splits [0, n) into chunks of at least `grain` (a multiple of `grain` except the last) and
  // calls fn(begin, end) for each, spread over the threads.
  void parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn);

 private:
  void worker_loop();
  bool claim_and_run(uint32_t generation);
  void run_round(int n_tasks, FunctionRef<void(int)> task);
  void watch_contention();

  int n_threads_;
  int spin_us_;
  std::vector<std::thread> workers_;
  // note: the generation, the round's task count and the next task index share one 64-bit word
  // (32 | 16 | 16 bits), claimed with compare-and-swap. A worker that wakes late for an old round
  // therefore never pairs an old index with a new count: its claim fails as soon as the word has
  // moved on. (With the count in a separate variable, a late worker could read the next round's
  // larger count and claim index n of the old round, a task that then ran twice.)
  static constexpr int kMaxTasksPerRound = 0xffff;
  std::atomic<uint64_t> task_word_{0};
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> done_tasks_{0};
  std::atomic<const FunctionRef<void(int)>*> task_{nullptr};
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> contended_{false};  // preempted lately: workers should not spin
  uint32_t runs_since_check_ = 0;
  int quiet_checks_left_ = 0;
  long last_involuntary_switches_ = 0;
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace minfer
