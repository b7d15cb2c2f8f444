// Quantized activations cut into runs (kernels/cpu/quant/act_runs.h).
#include "kernels/cpu/quant/act_runs.h"

#include <cstring>

#include "kernels/cpu/quant/quant_dot.h"

namespace minfer::cpu {

int code_shift(DType t) {
  switch (t) {
    case DType::q8_0: return 128;
    case DType::q4_0: return 8;
    case DType::q5_0: return 16;
    case DType::q3_k: return 4;
    case DType::q6_k: return 32;
    default: return 0;
  }
}

namespace {

template <class ActBlock>
void split_row(const ActBlock* blocks,  // (K / block) activation blocks of one row
               int block, int G, int shift, int64_t K,
               int8_t* q,               // (K)
               float* dx,               // (K / G)
               int32_t* shifted,        // (K / G)
               float* cx) {             // (K / G)
  for (int64_t k0 = 0; k0 < K; k0 += G) {
    const ActBlock& b = blocks[k0 / block];
    const int8_t* src = b.q + k0 % block;
    int32_t sum = 0;
    for (int j = 0; j < G; ++j) sum += src[j];
    std::memcpy(q + k0, src, size_t(G));
    dx[k0 / G] = b.d;
    shifted[k0 / G] = shift * sum;
    cx[k0 / G] = b.d * float(sum);
  }
}

// The arrays of M rows' runs in the calling thread's buffers, and a function that splits row m
// (quantized for w, at `row`) into them.
struct Runs {
  Activations a;
  int8_t* q;
  float *dx, *cx;
  int32_t* shifted;

  Runs(int64_t M, int64_t K, int G) {
    thread_local std::vector<int8_t> codes;
    thread_local std::vector<float> scales;
    thread_local std::vector<int32_t> sums;
    const int64_t runs = K / G;
    q = aligned_64(codes, size_t(M * K));
    dx = aligned_64(scales, size_t(2 * M * runs));
    cx = dx + M * runs;
    shifted = aligned_64(sums, size_t(M * runs));
    a = {q, dx, shifted, cx, runs};
  }
  void split(DType w, const uint8_t* row, int64_t m, int64_t K, int G, int shift) const {
    const int64_t runs = a.runs;
    with_act_blocks(w, row, [&](const auto* blocks, int block) {
      split_row(blocks, block, G, shift, K, q + m * K, dx + m * runs, shifted + m * runs, cx + m * runs);
    });
  }
};

}  // namespace

Activations split_activations(ThreadPool& pool, DType w, const uint8_t* act, int64_t M, int64_t K, int G, int shift) {
  const Runs runs(M, K, G);
  const size_t row_bytes = act_row_bytes(w, K);
  pool.parallel_for(M, 8, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) runs.split(w, act + size_t(m) * row_bytes, m, K, G, shift);
  });
  return runs.a;
}

Activations quantize_runs(ThreadPool& pool, DType w, const float* x, int64_t ld_x, int64_t M, int64_t K, int G,
                          int shift) {
  const Runs runs(M, K, G);
  const size_t row_bytes = act_row_bytes(w, K);
  pool.parallel_for(M, 8, [&](int64_t m0, int64_t m1) {
    thread_local std::vector<uint8_t> row;  // one quantized row at a time: grows once, then reused
    if (row.size() < row_bytes) row.resize(row_bytes);
    for (int64_t m = m0; m < m1; ++m) {
      quantize_activations(w, row.data(), x + m * ld_x, K);
      runs.split(w, row.data(), m, K, G, shift);
    }
  });
  return runs.a;
}

}  // namespace minfer::cpu
