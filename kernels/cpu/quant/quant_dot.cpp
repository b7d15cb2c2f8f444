// Activation quantizers, the choice of dot product per weight type, and the Q8_0 dot product
// (kernels/cpu/quant/quant_dot.h).
//
// Q8_0 x Q8_0 on AVX2: |w| * (x * sign(w)) in unsigned-by-signed byte multiplies (vpmaddubsw)
// summed to int32, converted once per block and scaled by both scales. 32 weights cost about
// eight instructions, far below what the memory stream allows.
#include "kernels/cpu/quant/quant_dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/quant/quant_simd.h"

namespace minfer::cpu {

namespace {

// d = max|x| / 127 and q = x / d to nearest even, for one block of 32.
float quantize_block_32(int8_t* q, const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
  return d;
}

}  // namespace

void quantize_act_q8_0(ActQ8_0* dst, const float* x, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) dst[b].d = quantize_block_32(dst[b].q, x + b * 32);
}

void quantize_act_q8_1(ActQ8_1* dst, const float* x, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    dst[b].d = quantize_block_32(dst[b].q, x + b * 32);
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += dst[b].q[j];
    dst[b].s = dst[b].d * float(sum);
  }
}

void quantize_act_q8_k(ActQ8_K* dst, const float* x, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* v = x + b * kQK;
    ActQ8_K& a = dst[b];
    float amax = 0.0f, max = 0.0f;  // the value of largest magnitude, with its sign
    for (int j = 0; j < kQK; ++j)
      if (std::fabs(v[j]) > amax) {
        amax = std::fabs(v[j]);
        max = v[j];
      }
    if (amax == 0.0f) {
      a = ActQ8_K{};
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK; ++j) a.q[j] = static_cast<int8_t>(std::min(127.0f, std::nearbyint(iscale * v[j])));
    for (int i = 0; i < 16; ++i) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += a.q[16 * i + j];
      a.bsums[i] = static_cast<int16_t>(sum);
    }
    a.d = 1.0f / iscale;
  }
}

void quantize_act_q8_0x4(ActQ8_0x4* dst, const float* x, int64_t n) {
  const int64_t nb = n / 32;
  for (int64_t g = 0; g < (nb + 3) / 4; ++g) {
    ActQ8_0x4& a = dst[g];
    a = ActQ8_0x4{};
    for (int i = 0; i < 4 && 4 * g + i < nb; ++i) {
      int8_t q[32];
      const float d = quantize_block_32(q, x + 32 * (4 * g + i));
      std::memcpy(a.low + 16 * i, q, 16);
      std::memcpy(a.high + 16 * i, q + 16, 16);
      int sum = 0;
      for (int j = 0; j < 32; ++j) sum += q[j];
      for (int lane = 4 * i; lane < 4 * i + 4; ++lane) {
        a.d[lane] = d;
        a.offset[lane] = -2 * sum;
      }
    }
  }
}

size_t dot_act_row_bytes(DType w, int64_t K) {
  if (w == DType::q4_0 && q4_0_dot_reads_groups()) return size_t((K / 32 + 3) / 4) * sizeof(ActQ8_0x4);
  return act_row_bytes(w, K);
}

void quantize_dot_activations(DType w, void* dst, const float* x, int64_t K) {
  if (w == DType::q4_0 && q4_0_dot_reads_groups()) return quantize_act_q8_0x4(static_cast<ActQ8_0x4*>(dst), x, K);
  quantize_activations(w, dst, x, K);
}

size_t act_row_bytes(DType w, int64_t K) {
  switch (w) {
    case DType::q8_0: case DType::q4_0: case DType::q5_0: return size_t(K / 32) * sizeof(ActQ8_0);
    case DType::q4_1: case DType::q5_1: return size_t(K / 32) * sizeof(ActQ8_1);
    default: MINFER_CHECK(is_k_quant(w), "no quantized dot product for ", dtype_name(w));
  }
  return size_t(K / kQK) * sizeof(ActQ8_K);
}

void quantize_activations(DType w, void* dst, const float* x, int64_t K) {
  switch (w) {
    case DType::q8_0: case DType::q4_0: case DType::q5_0: return quantize_act_q8_0(static_cast<ActQ8_0*>(dst), x, K);
    case DType::q4_1: case DType::q5_1: return quantize_act_q8_1(static_cast<ActQ8_1*>(dst), x, K);
    default: MINFER_CHECK(is_k_quant(w), "no quantized dot product for ", dtype_name(w));
  }
  quantize_act_q8_k(static_cast<ActQ8_K*>(dst), x, K);
}

DotRows dot_rows_for(DType w) {
  switch (w) {
    case DType::q8_0: return dot_rows_q8_0;
    case DType::q4_0: return dot_rows_q4_0;
    case DType::q4_1: return dot_rows_q4_1;
    case DType::q5_0: return dot_rows_q5_0;
    case DType::q5_1: return dot_rows_q5_1;
    case DType::q2_k: return dot_rows_q2_k;
    case DType::q3_k: return dot_rows_q3_k;
    case DType::q4_k: return dot_rows_q4_k;
    case DType::q5_k: return dot_rows_q5_k;
    case DType::q6_k: return dot_rows_q6_k;
    default: fail("no quantized dot product for ", dtype_name(w));
  }
}

const char* quant_dot_isa() {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  return "AVX-512";
#elif defined(__AVX2__)
  return "AVX2";
#else
  return "scalar";
#endif
}

namespace {

#if defined(__AVX2__)
template <int MR>
void q8_0_rows(float* out, int64_t ld_out, const BlockQ8* w, const char* act, size_t stride, int64_t nb) {
  __m256 acc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __builtin_prefetch(reinterpret_cast<const char*>(w + b) + 4096);  // 4 KiB ahead (bench/results/NOTES.md)
    const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].q));
    const __m256i wa = _mm256_sign_epi8(wq, wq);
    const float dw = qsimd::f16(w[b].d);
    for (int m = 0; m < MR; ++m) {
      const ActQ8_0& a = reinterpret_cast<const ActQ8_0*>(act + m * stride)[b];
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q));
      acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.d), qsimd::dot_i8_abs(wa, _mm256_sign_epi8(xv, wq)), acc[m]);
    }
  }
  for (int m = 0; m < MR; ++m) out[m * ld_out] = qsimd::hsum(acc[m]);
}
#endif

}  // namespace

void dot_rows_q8_0(float* out, int64_t ld_out, const void* w_row, const void* act, size_t act_stride, int rows,
                   int64_t nb) {
  const auto* w = static_cast<const BlockQ8*>(w_row);
  const char* a = static_cast<const char*>(act);
#if defined(__AVX2__)
  switch (rows) {
    case 4: return q8_0_rows<4>(out, ld_out, w, a, act_stride, nb);
    case 3: return q8_0_rows<3>(out, ld_out, w, a, act_stride, nb);
    case 2: return q8_0_rows<2>(out, ld_out, w, a, act_stride, nb);
    default: return q8_0_rows<1>(out, ld_out, w, a, act_stride, nb);
  }
#else
  for (int m = 0; m < rows; ++m) {
    const auto* x = reinterpret_cast<const ActQ8_0*>(a + m * act_stride);
    float s = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      int32_t dot = 0;
      for (int j = 0; j < 32; ++j) dot += int32_t(w[b].q[j]) * int32_t(x[b].q[j]);
      s += f16_to_f32(w[b].d) * x[b].d * float(dot);
    }
    out[m * ld_out] = s;
  }
#endif
}

}  // namespace minfer::cpu
