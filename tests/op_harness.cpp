#include "tests/op_harness.h"

#include <algorithm>
#include <cstddef>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "core/quants.h"
#include "core/error.h"

namespace minfer::test {

CachingPool& host_pool() {
  static CachingPool pool(std::make_unique<HostUpstream>());
  return pool;
}

Tensor host_tensor(const std::vector<int64_t>& shape, DType dtype) {
  return Tensor::empty(shape, dtype, DeviceKind::cpu, host_pool());
}

Tensor host_random(const std::vector<int64_t>& shape, std::mt19937& rng, float lo, float hi,
                   DType dtype) {
  Tensor f = host_tensor(shape, DType::f32);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < f.numel(); ++i) f.data_as<float>()[i] = dist(rng);
  if (dtype == DType::f32) return f;
  Tensor t = host_tensor(shape, dtype);
  if (is_k_quant(dtype)) {  // nothing makes K-quants: random blocks with small finite scales
    random_k_quant_blocks(t.data(), dtype, t.numel() / dtype_block(dtype), rng);
    return t;
  }
  t.convert_from(f);
  return t;
}

void random_k_quant_blocks(void* data, DType dtype, int64_t n_blocks, std::mt19937& rng, float max_scale) {
  auto* bytes = static_cast<uint8_t*>(data);
  const size_t block = size_t(dtype_block_bytes(dtype));
  for (size_t i = 0; i < size_t(n_blocks) * block; ++i) bytes[i] = static_cast<uint8_t>(rng());
  MINFER_CHECK(is_k_quant(dtype), "random_k_quant_blocks: ", dtype_name(dtype), " is not a K-quant");
  // The f16 scales (d, and dmin where the type has one) of each block, by their offsets.
  const ScaleOffsets scales = scale_offsets(dtype);
  std::uniform_real_distribution<float> scale(-max_scale, max_scale);
  for (int64_t b = 0; b < n_blocks; ++b)
    for (int i = 0; i < scales.count; ++i) {
      const uint16_t h = f32_to_f16(scale(rng));
      std::memcpy(bytes + size_t(b) * block + scales.at[i], &h, 2);
    }
}

Tensor to_backend(Backend& backend, const Tensor& host) {
  Tensor t = backend.empty(host.shape(), host.dtype());
  t.copy_from(host);
  return t;
}

Tensor to_host(const Tensor& t) {
  Tensor h = host_tensor(t.shape(), t.dtype());
  h.copy_from(t);
  return h;
}

Backend* backend_by_name(const std::string& name, std::string* reason) {
  static std::map<std::string, std::unique_ptr<Backend>> backends;
  auto it = backends.find(name);
  if (it != backends.end()) return it->second.get();
  BackendOptions options;
  BackendKind kind = name == "ref" ? BackendKind::ref : BackendKind::cpu;
  if (name.rfind("cuda", 0) == 0) {
    kind = BackendKind::cuda;
    if (cuda_device_count(reason) <= 0) return nullptr;
    if (name != "cuda") options.gemm = parse_gemm(name.substr(5));
  }
  auto backend = make_backend(kind, options);
  Backend* raw = backend.get();
  backends.emplace(name, std::move(backend));
  return raw;
}

GuardedOutput::GuardedOutput(Backend& backend, int64_t rows, int64_t cols, int64_t ld, DType dtype)
    : rows_(rows), cols_(cols), ld_(ld) {
  MINFER_CHECK(!is_quantized(dtype) && dtype_bytes(dtype, 1) == 4 && ld >= cols, "GuardedOutput: 4-byte types, ld >= cols");
  const int64_t span = rows * ld;
  buffer_ = backend.empty({span + 2 * kGuard}, dtype);
  Tensor pattern = host_tensor({span + 2 * kGuard}, dtype);
  auto* words = static_cast<uint32_t*>(pattern.data());
  std::fill(words, words + pattern.numel(), kSentinel);
  buffer_.copy_from(pattern);
  view_ = buffer_.slice(0, kGuard, kGuard + span).reshape({rows, ld}).slice(1, 0, cols);
}

void GuardedOutput::fill(const Tensor& host_values) { view_.copy_from(host_values); }

Tensor GuardedOutput::check(const std::string& label) const {
  Tensor all = to_host(buffer_);
  const auto* words = static_cast<const uint32_t*>(all.data());
  int64_t stray = 0, first = -1;
  for (int64_t i = 0; i < all.numel(); ++i) {
    int64_t j = i - kGuard;
    bool inside = j >= 0 && j < rows_ * ld_ && (j % ld_) < cols_;
    if (!inside && words[i] != kSentinel) {
      ++stray;
      if (first < 0) first = i;
    }
  }
  EXPECT_EQ(stray, 0) << label << ": " << stray << " words written outside the output, the first at "
                      << (first - kGuard) << " (offset from the output start)";
  Tensor values = host_tensor({rows_, cols_}, view_.dtype());
  values.copy_from(all.slice(0, kGuard, kGuard + rows_ * ld_).reshape({rows_, ld_}).slice(1, 0, cols_));
  return values;
}

double nmse(const Tensor& expected, const Tensor& actual) {
  const float* e = expected.data_as<float>();
  const float* a = actual.data_as<float>();
  double err = 0.0, norm = 0.0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    double d = double(e[i]) - double(a[i]);
    err += d * d;
    norm += double(e[i]) * double(e[i]);
  }
  return norm > 0.0 ? err / norm : err;
}

void expect_close(const Tensor& expected, const Tensor& actual, double limit,
                  const std::string& label) {
  ASSERT_EQ(expected.shape(), actual.shape()) << label;
  const float* e = expected.data_as<float>();
  const float* a = actual.data_as<float>();
  int64_t bad = 0;
  for (int64_t i = 0; i < actual.numel(); ++i) bad += std::isfinite(a[i]) ? 0 : 1;
  ASSERT_EQ(bad, 0) << label << ": " << bad << " NaN or Inf values in the output";
  double value = nmse(expected, actual);
  if (std::getenv("MINFER_TEST_VERBOSE")) std::printf("NMSE %.3g (limit %.3g) %s\n", value, limit, label.c_str());
  if (value <= limit) return;
  std::vector<int64_t> order(static_cast<size_t>(actual.numel()));
  for (int64_t i = 0; i < actual.numel(); ++i) order[i] = i;
  std::partial_sort(order.begin(), order.begin() + std::min<int64_t>(5, actual.numel()), order.end(),
                    [&](int64_t x, int64_t y) { return std::fabs(e[x] - a[x]) > std::fabs(e[y] - a[y]); });
  std::ostringstream worst;
  for (int64_t k = 0; k < std::min<int64_t>(5, actual.numel()); ++k)
    worst << "\n  [" << order[k] << "] expected " << e[order[k]] << " got " << a[order[k]];
  ADD_FAILURE() << label << ": NMSE " << value << " > " << limit << " (" << value / limit
                << "x the limit); largest differences:" << worst.str();
}

}  // namespace minfer::test
