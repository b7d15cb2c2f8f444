// When to split row-wise work across threads: handing work to the pool costs about a microsecond,
// so small jobs (one decode row of RMSNorm, say) run on the calling thread.
#pragma once

#include <cstdint>

#include "core/threads.h"

namespace minfer::cpu {

constexpr int64_t kMinParallelElements = 1 << 15;

// Calls fn(begin, end) over [0, rows), in parallel when rows * row_cost is large enough.
template <class Fn>
void for_rows(ThreadPool& pool, int64_t rows, int64_t row_cost, Fn&& fn) {
  if (rows <= 0) return;
  if (pool.size() == 1 || rows == 1 || rows * row_cost < kMinParallelElements) {
    fn(int64_t(0), rows);
    return;
  }
  int64_t grain = kMinParallelElements / (row_cost > 0 ? row_cost : 1);
  pool.parallel_for(rows, grain < 1 ? 1 : grain, fn);
}

}  // namespace minfer::cpu
