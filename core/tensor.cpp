#include "core/tensor.h"

#include <cstring>
#include <sstream>

#include "core/checked.h"
#include "core/error.h"

namespace minfer {

const char* row_layout_name(RowLayout layout) { return layout == RowLayout::packed16 ? "packed16" : "file"; }

void Tensor::set_shape(const int64_t* shape, size_t ndim) {
  MINFER_CHECK(ndim > 0 && ndim <= kMaxDims, "a tensor has 1 to ", kMaxDims, " dimensions, got ", ndim);
  ndim_ = static_cast<int>(ndim);
  uint64_t stride = 1;
  for (int d = ndim_ - 1; d >= 0; --d) {
    MINFER_CHECK(shape[d] >= 0, "negative tensor dimension ", shape[d]);
    shape_[d] = shape[d];
    stride_[d] = static_cast<int64_t>(stride);
    stride = checked_mul(stride, static_cast<uint64_t>(std::max<int64_t>(shape[d], 1)),
                         "tensor element count");
  }
}

Tensor Tensor::empty(const std::vector<int64_t>& shape, DType dtype, DeviceKind device,
                     CachingPool& pool) {
  Tensor t;
  t.set_shape(shape.data(), shape.size());
  t.dtype_ = dtype;
  t.device_ = device;
  uint64_t count = 1;
  for (int64_t s : shape) count = checked_mul(count, static_cast<uint64_t>(s), "tensor size");
  MINFER_CHECK(shape.back() % dtype_block(dtype) == 0, "a ", dtype_name(dtype), " tensor's rows are whole blocks of ",
               dtype_block(dtype), ", not ", shape.back());
  uint64_t bytes = dtype_bytes(dtype, count);
  MINFER_CHECK(bytes <= (uint64_t(1) << 62), "tensor of ", bytes, " bytes is too large");
  t.storage_ = std::make_shared<Storage>();
  t.storage_->block = pool.allocate(checked_size(bytes, "tensor bytes"));
  t.data_ = static_cast<char*>(t.storage_->block.data());
  return t;
}

Tensor Tensor::wrap(void* data, const std::vector<int64_t>& shape, DType dtype, DeviceKind device,
                    std::shared_ptr<void> owner) {
  Tensor t;
  t.set_shape(shape.data(), shape.size());
  MINFER_CHECK(shape.back() % dtype_block(dtype) == 0, "a ", dtype_name(dtype), " tensor's rows are whole blocks of ",
               dtype_block(dtype), ", not ", shape.back());
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->owner = std::move(owner);
  t.data_ = static_cast<char*>(data);
  return t;
}

int Tensor::check_dim(int dim) const {
  if (dim < 0) dim += ndim_;
  MINFER_CHECK(dim >= 0 && dim < ndim_, "dimension ", dim, " out of range for ", str());
  return dim;
}

int64_t Tensor::size(int dim) const { return shape_[check_dim(dim)]; }
int64_t Tensor::stride(int dim) const { return stride_[check_dim(dim)]; }

int64_t Tensor::numel() const {
  if (ndim_ == 0) return 0;
  int64_t n = 1;
  for (int d = 0; d < ndim_; ++d) n *= shape_[d];  // bounded by set_shape's checked product
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int d = ndim_ - 1; d >= 0; --d) {
    if (shape_[d] != 1 && stride_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

Tensor Tensor::reshaped(const int64_t* shape, size_t ndim) const {
  MINFER_CHECK(is_contiguous(), "reshape of a non-contiguous tensor ", str());
  MINFER_CHECK(layout_ == RowLayout::file, "reshape of ", str(), ": its rows are packed");
  Tensor t = *this;
  t.set_shape(shape, ndim);
  MINFER_CHECK(t.numel() == numel(), "reshape of ", str(), " to ", t.str(), " changes its size");
  return t;
}

Tensor Tensor::reshape(std::initializer_list<int64_t> shape) const { return reshaped(shape.begin(), shape.size()); }

Tensor Tensor::reshape(const std::vector<int64_t>& shape) const { return reshaped(shape.data(), shape.size()); }

bool Tensor::same_shape(const Tensor& other) const {
  if (ndim_ != other.ndim_) return false;
  for (int d = 0; d < ndim_; ++d)
    if (shape_[d] != other.shape_[d]) return false;
  return true;
}

Tensor Tensor::slice(int dim, int64_t begin, int64_t end) const {
  dim = check_dim(dim);
  MINFER_CHECK(0 <= begin && begin <= end && end <= shape_[dim], "slice [", begin, ", ", end,
               ") out of range for dimension ", dim, " of ", str());
  MINFER_CHECK(layout_ == RowLayout::file ||
                   (dim == 0 && begin % kPackedGroupRows == 0 && (end % kPackedGroupRows == 0 || end == shape_[0])),
               "slice [", begin, ", ", end, ") of dimension ", dim, " of ", str(), ": rows of a packed matrix are cut at ",
               "multiples of ", kPackedGroupRows, " (or at its end)");
  Tensor t = *this;
  t.shape_[dim] = end - begin;
  t.data_ = data_ + dtype_bytes(dtype_, static_cast<uint64_t>(begin * stride_[dim]));
  MINFER_CHECK(dim + 1 < ndim_ || t.shape_[dim] % dtype_block(dtype_) == 0, "slice of ", str(),
               " cuts a block of ", dtype_block(dtype_));
  return t;
}

Tensor Tensor::select(int dim, int64_t index) const {
  dim = check_dim(dim);
  MINFER_CHECK(ndim_ > 1, "select on a 1-dimensional tensor ", str());
  MINFER_CHECK(layout_ == RowLayout::file, "select on ", str(), ": its rows are packed");
  Tensor t = slice(dim, index, index + 1);
  for (int d = dim; d + 1 < ndim_; ++d) {
    t.shape_[d] = t.shape_[d + 1];
    t.stride_[d] = t.stride_[d + 1];
  }
  --t.ndim_;
  return t;
}

Tensor Tensor::with_row_layout(RowLayout layout) const {
  MINFER_CHECK(layout == RowLayout::file || ((ndim_ == 2 || ndim_ == 3) && is_quantized(dtype_) && is_contiguous()),
               "only a contiguous 2-D quantized matrix (or a stack of them) has its rows packed, not ", str());
  Tensor t = *this;
  t.layout_ = layout;
  return t;
}

namespace {

// Walks every dense run of the innermost dimension of two same-shaped tensors.
template <class Fn>
void for_each_row(int ndim, const int64_t* shape, const int64_t* dst_stride, const int64_t* src_stride,
                  char* dst, const char* src, DType dtype, Fn&& fn) {
  if (ndim == 1) {
    fn(dst, src);
    return;
  }
  for (int64_t i = 0; i < shape[0]; ++i)
    for_each_row(ndim - 1, shape + 1, dst_stride + 1, src_stride + 1,
                 dst + dtype_bytes(dtype, static_cast<uint64_t>(i * dst_stride[0])),
                 src + dtype_bytes(dtype, static_cast<uint64_t>(i * src_stride[0])), dtype, fn);
}

}  // namespace

void Tensor::copy_from(const Tensor& src) const {
  MINFER_CHECK(same_shape(src), "copy of ", src.str(), " into ", str(),
               ": shapes differ");
  MINFER_CHECK(src.dtype_ == dtype_, "copy of ", src.str(), " into ", str(), ": dtypes differ");
  MINFER_CHECK(src.layout_ == layout_, "copy of ", src.str(), " into ", str(), ": row layouts differ");
  if (numel() == 0) return;
  if (is_contiguous() && src.is_contiguous()) {
    copy_bytes(data_, device_, src.data_, src.device_, nbytes());
    return;
  }
  const int64_t inner = shape_[ndim_ - 1];
  const bool host = device_ == DeviceKind::cpu && src.device_ == DeviceKind::cpu;
  MINFER_CHECK(host || (rows_dense() && src.rows_dense()),
               "copy between devices needs dense rows: ", src.str(), " into ", str());
  MINFER_CHECK(dtype_block(dtype_) == 1 || (rows_dense() && src.rows_dense()), "copy of ", src.str(), " into ",
               str(), " needs dense rows of whole blocks");
  for_each_row(ndim_, shape_, stride_, src.stride_, data_, src.data_, dtype_,
               [&](char* d, const char* s) {
                 if (stride_[ndim_ - 1] == 1 && src.stride_[ndim_ - 1] == 1) {
                   copy_bytes(d, device_, s, src.device_, static_cast<size_t>(dtype_bytes(dtype_, uint64_t(inner))));
                 } else {
                   const size_t element = element_size();
                   for (int64_t i = 0; i < inner; ++i)
                     std::memcpy(d + i * stride_[ndim_ - 1] * static_cast<int64_t>(element),
                                 s + i * src.stride_[ndim_ - 1] * static_cast<int64_t>(element),
                                 element);
                 }
               });
}

void Tensor::convert_from(const Tensor& src) const {
  MINFER_CHECK(same_shape(src), "convert of ", src.str(), " into ", str(), ": shapes differ");
  MINFER_CHECK(device_ == DeviceKind::cpu && src.device_ == DeviceKind::cpu,
               "convert_from works on host tensors only");
  MINFER_CHECK(is_contiguous() && src.is_contiguous(), "convert_from needs contiguous tensors");
  MINFER_CHECK((layout_ == RowLayout::file && src.layout_ == RowLayout::file) || src.dtype_ == dtype_, "convert of ",
               src.str(), " into ", str(), ": packed rows are only copied, into a matrix packed the same way");
  if (src.dtype_ == dtype_) {
    copy_from(src);
  } else if (src.dtype_ == DType::f32) {
    convert_from_f32(data_, dtype_, reinterpret_cast<const float*>(src.data_), numel());
  } else if (dtype_ == DType::f32) {
    convert_to_f32(reinterpret_cast<float*>(data_), src.data_, src.dtype_, numel());
  } else {
    fail("cannot convert ", src.str(), " to ", dtype_name(dtype_));
  }
}

std::string Tensor::str() const {
  std::ostringstream out;
  out << dtype_name(dtype_) << "[";
  for (int d = 0; d < ndim_; ++d) out << (d ? ", " : "") << shape_[d];
  out << "] " << device_name(device_);
  if (layout_ != RowLayout::file) out << " " << row_layout_name(layout_);
  return out.str();
}

}  // namespace minfer
