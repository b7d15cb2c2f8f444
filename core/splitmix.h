// splitmix64's finalizer (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
// 2014): a bijection of 64-bit words in which every input bit moves about half the output bits.
// minfer uses it wherever a few words must be scattered well and cheaply: counter-based synthetic
// weights (kernels/ref/fill.h), prefix-cache block keys (engine/block_pool.cpp), cache scopes and
// per-request seeds (serve/). It is not a cryptographic hash.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace minfer {

MINFER_HOST_DEVICE inline uint64_t splitmix64_finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace minfer
