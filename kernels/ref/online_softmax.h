// The online softmax's update, written once for the CPU and CUDA kernels that attend in one pass
// over the keys (AttentionAlgorithm::online_softmax).
//
// softmax(s) . V seems to need max(s) before the first exponential. The online form keeps, over the
// keys seen so far, the largest score m and the sum l = sum_t e^(s_t - m). When a block of scores
// raises the max to m', everything summed so far was computed against the old max, and one factor
// e^(m - m') puts it right:
//   m' = max(m, max over the block),  l' = l e^(m - m') + sum over the block of e^(s - m')
//   acc' = acc e^(m - m') + sum over the block of e^(s - m') v
// After the last key, acc / l is the softmax-weighted sum of the values. Partial states of disjoint
// key ranges merge the same way, each scaled by e^(its max - the common max): that is what lets
// flash-decoding split one row's keys across CUDA blocks.
//
// A max of -inf means no key yet (or only masked ones, scored -inf); its weight in any rescaling
// is 0, where e^(-inf - -inf) would be NaN.
#pragma once

#include <cmath>

#include "core/host_device.h"

namespace minfer {

// e^(from - to): the factor that takes sums made against max `from` to max `to` (to >= from), and
// the weight of score `from` under max `to`. 0 when `from` is -inf.
MINFER_HOST_DEVICE inline float softmax_rescale(float from, float to) {
  return from == -INFINITY ? 0.0f : expf(from - to);
}

// One query row's running max and sum.
struct OnlineSoftmax {
  float max = -INFINITY;  // of the scores so far
  float sum = 0.0f;       // of e^(score - max) over the scores so far

  // Raises the max to cover a block whose largest score is `block_max` and rescales `sum`. Returns
  // the factor e^(old max - new max) by which the caller scales its output so far (0 on the first
  // block). The caller then adds the block's e^(s - max) to `sum`.
  MINFER_HOST_DEVICE float raise_max(float block_max) {
    const float new_max = fmaxf(max, block_max);
    const float correction = softmax_rescale(max, new_max);
    max = new_max;
    sum *= correction;
    return correction;
  }
};

}  // namespace minfer
