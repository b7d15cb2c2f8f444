// Tensor shapes, strides, views without copies, copies (strided and between devices), and the
// refusal of sizes that overflow.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"

namespace minfer {
namespace {

CachingPool& host_pool() {
  static CachingPool pool(std::make_unique<HostUpstream>());
  return pool;
}

Tensor iota(const std::vector<int64_t>& shape) {
  Tensor t = Tensor::empty(shape, DType::f32, DeviceKind::cpu, host_pool());
  std::iota(t.data_as<float>(), t.data_as<float>() + t.numel(), 0.0f);
  return t;
}

TEST(Tensor, ShapeAndStrides) {
  Tensor t = iota({2, 3, 4});
  EXPECT_EQ(t.ndim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.stride(1), 4);
  EXPECT_EQ(t.stride(-1), 1);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.str(), "f32[2, 3, 4] cpu");
  EXPECT_THROW(t.size(3), Error);
  EXPECT_THROW(Tensor::empty({1, 2, 3, 4, 5}, DType::f32, DeviceKind::cpu, host_pool()), Error);
  EXPECT_THROW(Tensor::empty({-1}, DType::f32, DeviceKind::cpu, host_pool()), Error);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = iota({4, 6});
  Tensor rows = t.slice(0, 1, 3);
  EXPECT_EQ(rows.data(), t.data_as<float>() + 6);
  EXPECT_EQ(rows.size(0), 2);
  EXPECT_TRUE(rows.is_contiguous());
  Tensor cols = t.slice(1, 2, 5);
  EXPECT_EQ(cols.size(1), 3);
  EXPECT_EQ(cols.stride(0), 6);
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_TRUE(cols.rows_dense());
  EXPECT_EQ(cols.data_as<float>()[6], 8.0f);  // row 1, column 2
  Tensor row2 = t.select(0, 2);
  EXPECT_EQ(row2.ndim(), 1);
  EXPECT_EQ(row2.data_as<float>()[0], 12.0f);
  Tensor r = t.reshape({2, 12});
  EXPECT_EQ(r.data(), t.data());
  EXPECT_THROW(t.reshape({5, 5}), Error);
  EXPECT_THROW(cols.reshape({12}), Error);
  EXPECT_THROW(t.slice(0, 3, 5), Error);
  // A view keeps its storage alive after the original is gone.
  Tensor view;
  {
    Tensor owner = iota({8});
    view = owner.slice(0, 4, 8);
  }
  EXPECT_EQ(view.data_as<float>()[0], 4.0f);
}

TEST(Tensor, StridedCopies) {
  Tensor t = iota({4, 6});
  Tensor dst = Tensor::empty({3, 4}, DType::f32, DeviceKind::cpu, host_pool());
  dst.copy_from(t.slice(0, 1, 4).slice(1, 1, 5));
  EXPECT_EQ(dst.data_as<float>()[0], 7.0f);
  EXPECT_EQ(dst.data_as<float>()[11], 22.0f);
  EXPECT_THROW(dst.copy_from(t), Error);
  Tensor i = Tensor::empty({4, 6}, DType::i32, DeviceKind::cpu, host_pool());
  EXPECT_THROW(i.copy_from(t), Error);
  EXPECT_THROW(t.data_as<int32_t>(), Error);
}

TEST(Tensor, ConvertsBetweenFloatTypes) {
  Tensor t = iota({3, 5});
  Tensor h = Tensor::empty({3, 5}, DType::bf16, DeviceKind::cpu, host_pool());
  h.convert_from(t);
  Tensor back = Tensor::empty({3, 5}, DType::f32, DeviceKind::cpu, host_pool());
  back.convert_from(h);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(back.data_as<float>()[i], float(i));
}

// The message of the Error fn throws ("" when it throws none).
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A packed16 matrix (RowLayout) is cut only where its groups of 16 rows begin, or at its end, and
// copied only into one packed the same way; its views keep the tag.
TEST(Tensor, PackedRowsAreCutAtGroupsOnly) {
  Tensor file = Tensor::empty({40, 64}, DType::q8_0, DeviceKind::cpu, host_pool());
  EXPECT_EQ(file.row_layout(), RowLayout::file);
  Tensor w = file.with_row_layout(RowLayout::packed16);
  EXPECT_EQ(w.row_layout(), RowLayout::packed16);
  EXPECT_EQ(w.data(), file.data());
  EXPECT_EQ(w.str(), "q8_0[40, 64] cpu packed16");
  EXPECT_EQ(w.nbytes(), file.nbytes());

  Tensor groups = w.slice(0, 16, 32);
  EXPECT_EQ(groups.row_layout(), RowLayout::packed16);
  EXPECT_EQ(static_cast<char*>(groups.data()) - static_cast<char*>(w.data()), 16 * 68);
  EXPECT_EQ(w.slice(0, 32, 40).size(0), 8);  // the tail: 8 rows in the file's layout
  EXPECT_EQ(w.slice(0, 16, 40).size(0), 24);
  EXPECT_EQ(w.slice(0, 0, 0).size(0), 0);
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{17, 32}, {16, 17}, {0, 39}, {32, 33}, {1, 40}}) {
    const std::string message = error_of([&] { w.slice(0, begin, end); });
    EXPECT_NE(message.find("slice [" + std::to_string(begin) + ", " + std::to_string(end) + ")"), std::string::npos)
        << begin << ", " << end << ": " << message;
    EXPECT_NE(message.find("multiples of 16"), std::string::npos) << message;
  }
  EXPECT_NE(error_of([&] { w.slice(1, 0, 32); }).find("packed"), std::string::npos);
  EXPECT_NE(error_of([&] { w.select(0, 0); }).find("packed"), std::string::npos);
  EXPECT_NE(error_of([&] { w.reshape({40 * 64}); }).find("packed"), std::string::npos);
  EXPECT_NO_THROW(file.slice(0, 17, 33));  // the file's layout is cut anywhere

  Tensor other = Tensor::empty({40, 64}, DType::q8_0, DeviceKind::cpu, host_pool());
  EXPECT_NE(error_of([&] { other.copy_from(w); }).find("row layouts differ"), std::string::npos);
  EXPECT_NE(error_of([&] { w.copy_from(other); }).find("row layouts differ"), std::string::npos);
  EXPECT_NE(error_of([&] { other.convert_from(w); }).find("row layouts differ"), std::string::npos);
  Tensor wide = Tensor::empty({40, 64}, DType::f32, DeviceKind::cpu, host_pool());
  EXPECT_NE(error_of([&] { wide.convert_from(w); }).find("packed rows are only copied"), std::string::npos);
  EXPECT_NE(error_of([&] { w.convert_from(wide); }).find("packed rows are only copied"), std::string::npos);
  std::memset(file.data(), 7, file.nbytes());
  Tensor packed_copy = other.with_row_layout(RowLayout::packed16);
  packed_copy.copy_from(w);  // packed the same way: a copy of the bytes
  EXPECT_EQ(std::memcmp(packed_copy.data(), file.data(), file.nbytes()), 0);

  EXPECT_THROW(iota({4, 4}).with_row_layout(RowLayout::packed16), Error);  // not quantized
  EXPECT_THROW(Tensor::empty({2, 3, 40, 64}, DType::q8_0, DeviceKind::cpu, host_pool()).with_row_layout(RowLayout::packed16),
               Error);  // neither a matrix nor a stack of matrices (a layer's experts)
  EXPECT_NO_THROW(Tensor::empty({2, 40, 64}, DType::q8_0, DeviceKind::cpu, host_pool()).with_row_layout(RowLayout::packed16));
  EXPECT_THROW(Tensor::empty({2, 40, 64}, DType::q8_0, DeviceKind::cpu, host_pool()).slice(1, 0, 32).with_row_layout(
                   RowLayout::packed16),
               Error);  // a stack's matrices must be whole: contiguous
}

TEST(Tensor, RefusesSizesThatOverflow) {
  int64_t huge = int64_t(1) << 40;
  try {
    Tensor::empty({huge, huge, huge}, DType::f32, DeviceKind::cpu, host_pool());
    FAIL() << "expected an overflow error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("overflow"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tensor::empty({huge, huge}, DType::f32, DeviceKind::cpu, host_pool()), Error);
}

TEST(Tensor, CudaTensorsNeedADevice) {
  std::string reason;
  if (cuda_device_count(&reason) > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(make_cuda_device_upstream(), Error);
  Tensor t = iota({4});
  float fake_device_memory[4];
  Tensor d = Tensor::wrap(fake_device_memory, {4}, DType::f32, DeviceKind::cuda);
  try {
    d.copy_from(t);
    FAIL() << "a copy to a CUDA tensor without a device must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace minfer
