// Overflow-checked size arithmetic. Every byte count derived from untrusted numbers (file headers,
// command-line sizes) goes through these, so an absurd shape is refused instead of wrapping around.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>

#include "core/error.h"

namespace minfer {

// a * b, or Error naming `what` when the product does not fit in uint64_t.
inline uint64_t checked_mul(uint64_t a, uint64_t b, const char* what) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) fail(what, ": ", a, " * ", b, " overflows 64 bits");
  return r;
}

inline uint64_t checked_add(uint64_t a, uint64_t b, const char* what) {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) fail(what, ": ", a, " + ", b, " overflows 64 bits");
  return r;
}

// Product of several factors, each checked.
inline uint64_t checked_product(std::initializer_list<uint64_t> factors, const char* what) {
  uint64_t r = 1;
  for (uint64_t f : factors) r = checked_mul(r, f, what);
  return r;
}

// Converts to size_t (no-op on 64-bit hosts, a real check elsewhere).
inline size_t checked_size(uint64_t v, const char* what) {
  if (v > std::numeric_limits<size_t>::max()) fail(what, ": ", v, " bytes do not fit in size_t");
  return static_cast<size_t>(v);
}

// Rounds v up to a multiple of `align` (a power of two), checked.
inline uint64_t checked_round_up(uint64_t v, uint64_t align, const char* what) {
  return checked_add(v, align - 1, what) & ~(align - 1);
}

}  // namespace minfer
