// splitmix64's finalizer (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
// 2014): a bijection of 64-bit words in which every input bit moves about half the output bits.
// minfer uses it wherever a few words must be scattered well and cheaply: counter-based synthetic
// weights (kernels/ref/fill.h), prefix-cache block keys (engine/block_pool.cpp), cache scopes and
// per-request seeds (serve/), and the digest of a model file's header that ranks compare
// (digest_bytes). It is not a cryptographic hash.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace minfer {

MINFER_HOST_DEVICE inline uint64_t splitmix64_finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A digest of bytes[0, n), chained from `digest`: each 8 bytes (the last zero-padded) folded
// through the finalizer, then the length.
inline uint64_t digest_bytes(const void* bytes, size_t n, uint64_t digest = 0) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, p + i, std::min<size_t>(8, n - i));
    digest = splitmix64_finalize(digest + 0x9e3779b97f4a7c15ull + word);
  }
  return splitmix64_finalize(digest ^ n);
}

}  // namespace minfer
