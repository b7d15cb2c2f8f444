// Tensor: a typed, strided view of memory on one device.
//
// A tensor is a pointer, a shape of up to 4 dimensions, strides counted in elements, a dtype and a
// device, plus a shared reference to the storage that keeps the memory alive. Views (reshape,
// slice, select) share that storage and copy nothing. Memory comes from a CachingPool
// (Tensor::empty) or from elsewhere, e.g. a memory-mapped checkpoint (Tensor::wrap).
//
// Kernels take raw pointers, row strides and sizes; the backends unpack tensors into those, so
// the tensor itself stays a small, device-agnostic value type.
//
// A quantized weight matrix may hold its rows in a backend's own layout instead of the file's
// (RowLayout): the tensor says so, and the views and copies that would read its rows as the
// file's are refused.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/pool.h"

namespace minfer {

// How a 2-D quantized matrix holds its rows. file: row after row, each row's blocks as the model
// file stores them. packed16: each group of 16 rows (kPackedGroupRows) is rearranged within the
// bytes of those 16 rows, and the last rows % 16 rows are as in the file (the CPU's packed
// kernels: kernels/cpu/quant/packed.h). So rows [begin, end) of a packed16 matrix are a packed16
// matrix when begin is a multiple of 16 and end is too or is the last row. A 3-D tensor, a stack of
// matrices (a layer's experts), is packed16 when each of its matrices is.
enum class RowLayout : uint8_t { file, packed16 };
constexpr int64_t kPackedGroupRows = 16;
const char* row_layout_name(RowLayout layout);  // "file", "packed16"

class Tensor {
 public:
  static constexpr int kMaxDims = 4;

  Tensor() = default;

  // Uninitialised memory from `pool` (the pool must belong to `device`). The byte size is
  // computed with overflow checks; an impossible shape throws Error.
  static Tensor empty(const std::vector<int64_t>& shape, DType dtype, DeviceKind device,
                      CachingPool& pool);
  // Memory owned elsewhere; `owner` (may be null) is kept alive as long as any view.
  static Tensor wrap(void* data, const std::vector<int64_t>& shape, DType dtype,
                     DeviceKind device, std::shared_ptr<void> owner = nullptr);

  bool defined() const { return ndim_ > 0; }  // every tensor has 1 to 4 dims
  int ndim() const { return ndim_; }
  int64_t size(int dim) const;
  int64_t stride(int dim) const;
  std::vector<int64_t> shape() const { return {shape_, shape_ + ndim_}; }  // a copy: allocates
  bool same_shape(const Tensor& other) const;                              // allocates nothing
  int64_t numel() const;
  DType dtype() const { return dtype_; }
  DeviceKind device() const { return device_; }
  RowLayout row_layout() const { return layout_; }
  // Bytes per element of a plain dtype; Error for a quantized one, whose elements have no whole
  // size (its blocks do: dtype_block_bytes).
  size_t element_size() const { return static_cast<size_t>(dtype_bytes(dtype_, 1)); }
  size_t nbytes() const { return static_cast<size_t>(dtype_bytes(dtype_, static_cast<uint64_t>(numel()))); }
  bool is_contiguous() const;
  // Rows are dense (last stride 1) though rows may be spaced apart, e.g. a column slice.
  bool rows_dense() const { return ndim_ == 0 || stride_[ndim_ - 1] == 1 || shape_[ndim_ - 1] <= 1; }

  void* data() const { return data_; }
  template <class T>
  T* data_as() const;

  // Views.
  // Contiguous tensors only. The braced form, reshape({a, b}), allocates nothing (the decode loop
  // takes views every layer).
  Tensor reshape(std::initializer_list<int64_t> shape) const;
  Tensor reshape(const std::vector<int64_t>& shape) const;
  Tensor slice(int dim, int64_t begin, int64_t end) const;   // [begin, end) along dim
  Tensor select(int dim, int64_t index) const;               // drops dim
  // The same memory with its rows tagged as `layout`; the bytes are not touched (whoever tags a
  // matrix packed16 has rearranged them). packed16: a contiguous 2-D or 3-D quantized tensor. A packed16
  // tensor keeps its tag in its views: it is sliced along its rows only, at the boundaries RowLayout
  // names, and reshaped not at all.
  Tensor with_row_layout(RowLayout layout) const;

  // Copies src's elements into this tensor: same shape, dtype and row layout, any devices.
  // Host-to-host copies take any strides; copies that involve a device need dense rows on both
  // sides.
  void copy_from(const Tensor& src) const;
  // Host only: copies with conversion to or from f32 (f16, bf16, quantized blocks; only the legacy
  // quantized types are made from f32), same shape, contiguous, file row layout (a packed16
  // tensor is only copied, into one packed the same way).
  void convert_from(const Tensor& src) const;

  std::string str() const;  // e.g. "f32[3, 64] cpu", "q4_0[64, 64] cpu packed16"

 private:
  struct Storage {
    PoolBlock block;
    std::shared_ptr<void> owner;
  };
  std::shared_ptr<Storage> storage_;
  char* data_ = nullptr;
  int ndim_ = 0;
  int64_t shape_[kMaxDims] = {0, 0, 0, 0};
  int64_t stride_[kMaxDims] = {0, 0, 0, 0};
  DType dtype_ = DType::f32;
  DeviceKind device_ = DeviceKind::cpu;
  RowLayout layout_ = RowLayout::file;

  void set_shape(const int64_t* shape, size_t ndim);
  Tensor reshaped(const int64_t* shape, size_t ndim) const;
  int check_dim(int dim) const;
};

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::f32; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::i32; }

template <class T>
T* Tensor::data_as() const {
  if constexpr (std::is_same_v<std::remove_const_t<T>, uint16_t>) {
    if (dtype_ != DType::f16 && dtype_ != DType::bf16)
      fail("tensor ", str(), " is not a 16-bit float tensor");
  } else {
    if (dtype_ != dtype_of<std::remove_const_t<T>>())
      fail("tensor ", str(), " accessed as ", dtype_name(dtype_of<std::remove_const_t<T>>()));
  }
  return reinterpret_cast<T*>(data_);
}

}  // namespace minfer
