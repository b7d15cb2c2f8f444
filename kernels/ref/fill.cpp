#include "kernels/ref/fill.h"

#include "kernels/ref/element.h"

namespace minfer::ref {

void fill_uniform(void* data, DType dtype, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = 0; i < n; ++i) store_element(data, dtype, i, uniform_at(seed, uint64_t(i), lo, hi));
}

}  // namespace minfer::ref
