// Quantized activations cut into the runs of the integer products (quant_gemm.cpp, packed.cpp):
// each row's int8 codes copied out of their blocks into one contiguous row, and per run of G codes
// (G = unpack::affine_run of the weights' type: 16 or 32) the block's scale dx, shift * sum of the
// run's codes (the symmetric types) and dx * sum of them (the types with a minimum). Both kernels
// sum a run as S = sum u a - shift * sum a and scale it with these terms (quant_gemm.cpp's top).
//
// note: the codes are copied once per call out of their blocks into contiguous rows (the K-quants'
// blocks put d before the codes and the bsums after), so that a row's 4-byte broadcasts step
// through one array and the per-run dx and sums sit in arrays of their own.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/threads.h"

// The integer products' instruction set, one choice for quant_gemm.cpp and packed_k.cpp: AVX-512
// VNNI (vpdpbusd), else AVX2 with FMA (vpmaddubsw).
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define MINFER_QUANT_GEMM_VNNI 1
#elif defined(__AVX2__) && defined(__FMA__)
#define MINFER_QUANT_GEMM_AVX2 1
#endif

namespace minfer::cpu {

// The shift that makes a symmetric type's codes unsigned bytes: the stored code itself (Q4_0's
// q + 8 .. Q6_K's q + 32), Q8_0's q + 128; 0 for the types with a minimum.
int code_shift(DType t);

// A vector grown once, then reused, whose data starts on a 64-byte line, so that 64-byte loads
// never straddle two lines (std::vector's large buffers start 16 bytes into one).
template <class T>
T* aligned_64(std::vector<T>& buffer, size_t n) {
  buffer.resize(n + 64 / sizeof(T));
  const auto address = reinterpret_cast<uintptr_t>(buffer.data());
  return reinterpret_cast<T*>((address + 63) & ~uintptr_t(63));
}

// One call's activations as the kernels read them, per run of G codes of each row.
struct Activations {
  const int8_t* q;         // (M, K): each row's codes, contiguous
  const float* dx;         // (M, K / G): the scale of the run's block
  const int32_t* shifted;  // (M, K / G): shift * sum of the run's codes (symmetric types)
  const float* cx;         // (M, K / G): dx * sum of the run's codes (types with a minimum)
  int64_t runs;            // K / G
};

// The runs of M rows already quantized for weights of type w: act holds M rows of
// act_row_bytes(w, K) bytes (quantize_activations). The arrays live in the calling thread's
// buffers, grown once, valid until its next call of either function.
Activations split_activations(ThreadPool& pool, DType w, const uint8_t* act, int64_t M, int64_t K, int G, int shift);

// The same from f32 rows: each row of x quantized by quantize_activations (on the pool's threads),
// then split.
Activations quantize_runs(ThreadPool& pool, DType w, const float* x, int64_t ld_x, int64_t M, int64_t K, int G,
                          int shift);

}  // namespace minfer::cpu
