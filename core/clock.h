// Time for measurements: seconds on the steady clock, one clock for the whole process, so that
// times taken in different places (the scheduler's, a client's) can be subtracted from each other.
#pragma once

#include <chrono>

namespace minfer {

inline double seconds_of(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}
inline double now_seconds() { return seconds_of(std::chrono::steady_clock::now()); }

}  // namespace minfer
