// The few SIMD primitives the CPU kernels need: a float vector, fused multiply-add, a horizontal
// sum, and loads that widen f16 and bf16 to f32 inside registers.
//
// The build compiles with -march=native (MINFER_NATIVE, on by default), so the widest instruction
// set of the build machine is chosen at compile time: AVX-512 (16 floats), AVX2 + FMA (8 floats),
// or plain scalar code elsewhere. bf16 -> f32 is a shift of each 16-bit value into the top half of
// a 32-bit lane; f16 -> f32 is the F16C instruction (vcvtph2ps), or the scalar conversion when
// the CPU has no F16C.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace minfer::cpu::simd {

#if defined(__AVX512F__)
constexpr int kWidth = 16;
using Vec = __m512;
inline Vec zero() { return _mm512_setzero_ps(); }
inline Vec load(const float* p) { return _mm512_loadu_ps(p); }
inline Vec load_bf16(const uint16_t* p) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline Vec load_f16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// 2 * kWidth bf16 values as their even- and odd-indexed halves in f32: a shift and a mask in each
// 32-bit lane, no shuffle across lanes (load_bf16 widens with one).
inline void load_bf16_pairs(const uint16_t* p, Vec* even, Vec* odd) {
  const __m512i v = _mm512_loadu_si512(p);
  *even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  *odd = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
inline void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
inline Vec set1(float v) { return _mm512_set1_ps(v); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline float sum(Vec v) { return _mm512_reduce_add_ps(v); }
// out[i] = sum of the lanes of v_i, for four vectors at once: 128-bit lanes are paired across the
// vectors first, so the four horizontal sums share their shuffles.
inline void sum4(Vec v0, Vec v1, Vec v2, Vec v3, float* out) {
  __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, 0x44), _mm512_shuffle_f32x4(v0, v1, 0xEE));
  __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(v2, v3, 0x44), _mm512_shuffle_f32x4(v2, v3, 0xEE));
  // 128-bit lane i of t holds four partial sums of v_i
  __m512 t = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, 0x88), _mm512_shuffle_f32x4(s01, s23, 0xDD));
  t = _mm512_add_ps(t, _mm512_permute_ps(t, 0x4E));
  t = _mm512_add_ps(t, _mm512_permute_ps(t, 0xB1));
  __m512 firsts = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), t);
  _mm_storeu_ps(out, _mm512_castps512_ps128(firsts));
}
// out[i] = sum of the lanes of v[i] for 16 vectors: one transpose-and-add tree whose shuffles
// are shared by all 16 sums (about 3 instructions per sum instead of 8 for separate ones).
inline Vec sum16(const Vec* v) {
  __m512 half[8], quarter[4];
  for (int i = 0; i < 8; ++i)  // 128-bit lanes 0,1 | 2,3 of v[2i] and v[2i+1], added
    half[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                            _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  for (int i = 0; i < 4; ++i)  // 128-bit lane j of quarter[i] holds 4 partial sums of v[4i + j]
    quarter[i] = _mm512_add_ps(_mm512_shuffle_f32x4(half[2 * i], half[2 * i + 1], 0x88),
                               _mm512_shuffle_f32x4(half[2 * i], half[2 * i + 1], 0xDD));
  // Within each 128-bit lane j: a 4 x 4 transpose-add of quarter[0..3] gives the sums of
  // v[j], v[4 + j], v[8 + j], v[12 + j].
  __m512 a01 = _mm512_add_ps(_mm512_unpacklo_ps(quarter[0], quarter[1]), _mm512_unpackhi_ps(quarter[0], quarter[1]));
  __m512 a23 = _mm512_add_ps(_mm512_unpacklo_ps(quarter[2], quarter[3]), _mm512_unpackhi_ps(quarter[2], quarter[3]));
  __m512 r = _mm512_add_ps(_mm512_shuffle_ps(a01, a23, 0x44), _mm512_shuffle_ps(a01, a23, 0xEE));
  // r holds sum(v[4k + j]) at 4j + k: put it in order.
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}
// In place: v[j] lane i <- v[i] lane j, a 16 x 16 transpose in 64 shuffles (pairs of floats,
// then quadruples, then 128-bit lanes twice).
inline void transpose16(Vec* v) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
  }
  // u[4q + c], 128-bit lane L: rows 4q .. 4q+3 of column 4L + c
  for (int q = 0; q < 4; ++q) {
    u[4 * q + 0] = _mm512_shuffle_ps(t[4 * q + 0], t[4 * q + 2], 0x44);
    u[4 * q + 1] = _mm512_shuffle_ps(t[4 * q + 0], t[4 * q + 2], 0xEE);
    u[4 * q + 2] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
    u[4 * q + 3] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
  }
  // For each c, a 4 x 4 transpose of 128-bit lanes across u[c], u[4 + c], u[8 + c], u[12 + c].
  for (int c = 0; c < 4; ++c) {
    __m512 even01 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), odd01 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    __m512 even23 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88), odd23 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    v[c] = _mm512_shuffle_f32x4(even01, even23, 0x88);
    v[8 + c] = _mm512_shuffle_f32x4(even01, even23, 0xDD);
    v[4 + c] = _mm512_shuffle_f32x4(odd01, odd23, 0x88);
    v[12 + c] = _mm512_shuffle_f32x4(odd01, odd23, 0xDD);
  }
}
// Lane i = sum of the lanes of v[i], for kWidth vectors: the name the width-generic kernels use.
inline Vec sum_each(const Vec* v) { return sum16(v); }
inline const char* name() { return "AVX-512"; }
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int kWidth = 8;
using Vec = __m256;
inline Vec zero() { return _mm256_setzero_ps(); }
inline Vec load(const float* p) { return _mm256_loadu_ps(p); }
inline Vec load_bf16(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline void load_bf16_pairs(const uint16_t* p, Vec* even, Vec* odd) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  *even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  *odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
inline Vec load_f16(const uint16_t* p) {
#if defined(__F16C__)
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#else
  alignas(32) float f[8];
  for (int i = 0; i < 8; ++i) f[i] = f16_to_f32(p[i]);
  return _mm256_load_ps(f);
#endif
}
inline void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
inline Vec set1(float v) { return _mm256_set1_ps(v); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline float sum(Vec v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline void sum4(Vec v0, Vec v1, Vec v2, Vec v3, float* out) {
  __m256 h01 = _mm256_hadd_ps(v0, v1), h23 = _mm256_hadd_ps(v2, v3);
  __m256 h = _mm256_hadd_ps(h01, h23);  // per 128-bit half: [v0, v1, v2, v3] partial sums
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}
// Lane i = sum of the lanes of v[i], for 8 vectors: three rounds of pairwise horizontal adds
// shared by all 8 sums, then the two 128-bit halves added (about 2 instructions per sum).
inline Vec sum_each(const Vec* v) {
  __m256 h01 = _mm256_hadd_ps(v[0], v[1]), h23 = _mm256_hadd_ps(v[2], v[3]);
  __m256 h45 = _mm256_hadd_ps(v[4], v[5]), h67 = _mm256_hadd_ps(v[6], v[7]);
  // per 128-bit half: partial sums of [v0, v1, v2, v3] and of [v4, v5, v6, v7]
  __m256 lo = _mm256_hadd_ps(h01, h23), hi = _mm256_hadd_ps(h45, h67);
  return _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31));
}
inline const char* name() { return "AVX2+FMA"; }
#else
constexpr int kWidth = 1;
using Vec = float;
inline Vec zero() { return 0.0f; }
inline Vec load(const float* p) { return *p; }
inline Vec load_bf16(const uint16_t* p) { return bf16_to_f32(*p); }
inline void load_bf16_pairs(const uint16_t* p, Vec* even, Vec* odd) {
  *even = bf16_to_f32(p[0]);
  *odd = bf16_to_f32(p[1]);
}
inline Vec load_f16(const uint16_t* p) { return f16_to_f32(*p); }
inline void store(float* p, Vec v) { *p = v; }
inline Vec mul(Vec a, Vec b) { return a * b; }
inline Vec set1(float v) { return v; }
inline Vec fma(Vec a, Vec b, Vec c) { return a * b + c; }
inline Vec add(Vec a, Vec b) { return a + b; }
inline float sum(Vec v) { return v; }
inline void sum4(Vec v0, Vec v1, Vec v2, Vec v3, float* out) {
  out[0] = v0;
  out[1] = v1;
  out[2] = v2;
  out[3] = v3;
}
inline const char* name() { return "scalar"; }
#endif

// Keeps v in a register: without it, GCC folds a vector used by several FMAs back into each FMA as
// a memory operand, and a kernel meant to load each activation once loads it four times.
inline void keep_in_register(Vec& v) {
#if defined(__x86_64__) && (defined(__AVX512F__) || defined(__AVX2__))
  __asm__("" : "+v"(v));
#else
  (void)v;
#endif
}

// Weight formats as types, so a kernel templated on one has no dtype branch in its inner loop.
struct F32 {
  using Stored = float;
  static Vec load(const float* p) { return simd::load(p); }
  static float scalar(const float* p) { return *p; }
};
struct BF16 {
  using Stored = uint16_t;
  static Vec load(const uint16_t* p) { return load_bf16(p); }
  static float scalar(const uint16_t* p) { return bf16_to_f32(*p); }
};
struct F16 {
  using Stored = uint16_t;
  static Vec load(const uint16_t* p) { return load_f16(p); }
  static float scalar(const uint16_t* p) { return f16_to_f32(*p); }
};

// How far ahead of the weight stream decode's one-row kernels (kernels/cpu/matmul.cpp's one_row,
// tuned/matmul_tuned.cpp's one_row_bf16) prefetch every cache line, in bytes: 4 KiB with AVX-512,
// 256 B with AVX2, each chosen by measuring several distances (bench/results/NOTES.md, "CPU matrix
// products": the prefetch distance).
// note: keyed on the vector width because the machines measured so far split that way: Intel and
// AMD Zen 4 with AVX-512, AMD Zen 2 and Zen 3 with AVX2.
constexpr int64_t kStreamAhead = kWidth >= 16 ? 4096 : 256;

// Prefetches the cache lines of [p + kStreamAhead, p + kStreamAhead + bytes).
inline void prefetch_stream(const void* p, int64_t bytes) {
  for (int64_t line = 0; line < bytes; line += 64) __builtin_prefetch(static_cast<const char*>(p) + kStreamAhead + line);
}

// Calls fn(F32{}), fn(BF16{}) or fn(F16{}) for the dtype; Error for anything else.
template <class Fn>
void dispatch_weight_type(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32: fn(F32{}); return;
    case DType::bf16: fn(BF16{}); return;
    case DType::f16: fn(F16{}); return;
    default: break;  // quantized blocks are handled by the callers that take them
  }
  fail("weights must be f32, bf16 or f16, not ", dtype_name(t));
}

}  // namespace minfer::cpu::simd
