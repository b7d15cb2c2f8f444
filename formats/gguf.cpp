#include "formats/gguf.h"

#include <algorithm>
#include <cstring>

#include "core/checked.h"
#include "core/error.h"

namespace minfer {

namespace {

constexpr uint64_t kMaxTensors = 1 << 16;
constexpr uint64_t kMaxKeys = 1 << 16;
constexpr uint64_t kMaxString = uint64_t(64) << 20;
constexpr uint64_t kMaxArray = uint64_t(1) << 24;  // elements: vocabularies and merges are far smaller

const char* value_type_name(uint32_t t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
  return t < 13 ? names[t] : "unknown";
}

// Bytes of one element of a scalar value type (0 for string and array).
uint64_t scalar_bytes(uint32_t t) {
  switch (static_cast<GgufValue::Type>(t)) {
    case GgufValue::Type::u8: case GgufValue::Type::i8: case GgufValue::Type::boolean: return 1;
    case GgufValue::Type::u16: case GgufValue::Type::i16: return 2;
    case GgufValue::Type::u32: case GgufValue::Type::i32: case GgufValue::Type::f32: return 4;
    case GgufValue::Type::u64: case GgufValue::Type::i64: case GgufValue::Type::f64: return 8;
    default: return 0;
  }
}

// ggml's (elements per block, bytes per block) for the types a file may name.
struct BlockSize {
  uint64_t elements, bytes;
};
bool block_size(uint32_t type, BlockSize* out) {
  DType dtype;
  if (!dtype_of_ggml_type(type, &dtype)) return false;
  *out = {uint64_t(dtype_block(dtype)), uint64_t(dtype_block_bytes(dtype))};
  return true;
}

class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& source) : data_(data), size_(size), source_(source) {}
  uint64_t position() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  void need(uint64_t bytes, const char* what) {
    if (bytes > left()) fail(source_, ": the file ends inside ", what, " (", bytes, " bytes needed at ", pos_, ", ", left(), " left)");
  }
  template <class T>
  T scalar(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const char* what) {
    const uint64_t n = scalar<uint64_t>(what);
    if (n > kMaxString) fail(source_, ": ", what, " is a string of ", n, " bytes (limit ", kMaxString, ")");
    need(n, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += n;
    return s;
  }
  GgufValue value(uint32_t type, const std::string& key, bool in_array) {
    GgufValue v;
    if (type > 12) fail(source_, ": metadata '", key, "' has an unknown value type ", type);
    v.type = static_cast<GgufValue::Type>(type);
    const char* what = "a metadata value";
    switch (v.type) {
      case GgufValue::Type::u8: v.integer = scalar<uint8_t>(what); break;
      case GgufValue::Type::i8: v.integer = scalar<int8_t>(what); break;
      case GgufValue::Type::u16: v.integer = scalar<uint16_t>(what); break;
      case GgufValue::Type::i16: v.integer = scalar<int16_t>(what); break;
      case GgufValue::Type::u32: v.integer = scalar<uint32_t>(what); break;
      case GgufValue::Type::i32: v.integer = scalar<int32_t>(what); break;
      case GgufValue::Type::i64: v.integer = scalar<int64_t>(what); break;
      case GgufValue::Type::u64: {
        const uint64_t u = scalar<uint64_t>(what);
        if (u > uint64_t(INT64_MAX)) fail(source_, ": metadata '", key, "' = ", u, " is too large");
        v.integer = static_cast<int64_t>(u);
        break;
      }
      case GgufValue::Type::f32: v.number = scalar<float>(what); break;
      case GgufValue::Type::f64: v.number = scalar<double>(what); break;
      case GgufValue::Type::boolean: {
        const uint8_t b = scalar<uint8_t>(what);
        if (b > 1) fail(source_, ": metadata '", key, "' is a bool of value ", int(b));
        v.boolean = b == 1;
        break;
      }
      case GgufValue::Type::string: v.text = string(what); break;
      case GgufValue::Type::array: {
        if (in_array) fail(source_, ": metadata '", key, "' nests arrays");
        const uint32_t element = scalar<uint32_t>(what);
        const uint64_t count = scalar<uint64_t>(what);
        if (element > 12 || element == uint32_t(GgufValue::Type::array))
          fail(source_, ": metadata '", key, "' is an array of ", value_type_name(element));
        v.element = static_cast<GgufValue::Type>(element);
        // Each element takes at least one byte (a string at least eight): a count the file
        // cannot hold is refused before anything is reserved for it.
        const uint64_t least = element == uint32_t(GgufValue::Type::string) ? 8 : scalar_bytes(element);
        if (count > left() / least || count > kMaxArray)
          fail(source_, ": metadata '", key, "' claims ", count, " elements, more than the file holds or ", kMaxArray);
        if (element == uint32_t(GgufValue::Type::string)) {
          v.strings.reserve(static_cast<size_t>(count));
          for (uint64_t i = 0; i < count; ++i) v.strings.push_back(string(what));
        } else {
          v.numbers.reserve(static_cast<size_t>(count));
          for (uint64_t i = 0; i < count; ++i) {
            GgufValue x = value(element, key, true);
            const bool real = x.type == GgufValue::Type::f32 || x.type == GgufValue::Type::f64;
            v.numbers.push_back(real ? x.number : x.type == GgufValue::Type::boolean ? double(x.boolean) : double(x.integer));
          }
        }
        break;
      }
    }
    return v;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& source_;
};

}  // namespace

bool dtype_of_ggml_type(uint32_t type, DType* out) {
  for (const auto& [ggml, dtype] : kGgmlTypes)
    if (uint32_t(ggml) == type) {
      *out = dtype;
      return true;
    }
  return false;
}

uint32_t ggml_type_of(DType dtype) {
  for (const auto& [ggml, d] : kGgmlTypes)
    if (d == dtype) return uint32_t(ggml);
  fail("GGUF has no type for ", dtype_name(dtype));
}

const char* ggml_type_name(uint32_t type) {
  static const char* names[] = {"F32",  "F16",  "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0",    "Q5_1",    "Q8_0",
                                "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",    "IQ2_XXS", "IQ2_XS",
                                "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32",
                                "I64", "F64", "IQ1_M", "BF16"};
  return type < sizeof(names) / sizeof(names[0]) ? names[type] : "an unknown type";
}

GgufContents parse_gguf(const uint8_t* data, size_t size, const std::string& source) {
  Reader r(data, size, source);
  const uint32_t magic = r.scalar<uint32_t>("the magic");
  if (magic != 0x46554747u) fail(source, ": not a GGUF file (no \"GGUF\" magic)");
  GgufContents g;
  g.version = r.scalar<uint32_t>("the version");
  if (g.version != 2 && g.version != 3) fail(source, ": GGUF version ", g.version, " is not supported (2 and 3 are)");
  const uint64_t n_tensors = r.scalar<uint64_t>("the tensor count");
  const uint64_t n_keys = r.scalar<uint64_t>("the metadata count");
  if (n_tensors > kMaxTensors) fail(source, ": ", n_tensors, " tensors (limit ", kMaxTensors, ")");
  if (n_keys > kMaxKeys) fail(source, ": ", n_keys, " metadata keys (limit ", kMaxKeys, ")");
  for (uint64_t i = 0; i < n_keys; ++i) {
    std::string key = r.string("a metadata key");
    const uint32_t type = r.scalar<uint32_t>("a metadata type");
    GgufValue v = r.value(type, key, false);
    if (!g.metadata.emplace(key, std::move(v)).second) fail(source, ": metadata '", key, "' appears twice");
  }
  if (auto it = g.metadata.find("general.alignment"); it != g.metadata.end()) {
    const GgufValue& a = it->second;
    if (a.type != GgufValue::Type::u32 || a.integer < 1 || a.integer > (1 << 20) || (a.integer & (a.integer - 1)) != 0)
      fail(source, ": general.alignment must be a power of two up to 2^20 (u32)");
    g.alignment = static_cast<uint64_t>(a.integer);
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = r.string("a tensor name");
    const uint32_t n_dims = r.scalar<uint32_t>("a tensor's dimension count");
    if (n_dims < 1 || n_dims > 4) fail(source, ": tensor '", t.name, "' has ", n_dims, " dimensions (1 to 4)");
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t extent = r.scalar<uint64_t>("a tensor dimension");
      if (extent < 1 || extent > (uint64_t(1) << 40)) fail(source, ": tensor '", t.name, "' has a dimension of ", extent);
      elements = checked_mul(elements, extent, "GGUF tensor size");
      t.dims.push_back(static_cast<int64_t>(extent));
    }
    t.type = r.scalar<uint32_t>("a tensor type");
    t.offset = r.scalar<uint64_t>("a tensor offset");
    BlockSize block{};
    if (block_size(t.type, &block)) {
      if (uint64_t(t.dims[0]) % block.elements != 0)
        fail(source, ": tensor '", t.name, "' of type ", ggml_type_name(t.type), " has rows of ", t.dims[0],
             ", not a multiple of its ", block.elements, "-element blocks");
      t.bytes = checked_mul(elements / block.elements, block.bytes, "GGUF tensor size");
    }  // other types: sized 0 here, refused by name when the model asks for them
    if (t.offset % g.alignment != 0) fail(source, ": tensor '", t.name, "' starts at an offset not aligned to ", g.alignment);
    if (!g.tensors.emplace(t.name, t).second) fail(source, ": tensor '", t.name, "' appears twice");
  }
  g.data_offset = checked_round_up(r.position(), g.alignment, "GGUF data offset");
  if (g.data_offset > size) fail(source, ": the file ends before its tensor data");
  const uint64_t data_bytes = size - g.data_offset;
  std::vector<std::pair<uint64_t, const GgufTensorInfo*>> ranges;
  for (const auto& [name, t] : g.tensors) {
    if (t.offset > data_bytes || t.bytes > data_bytes - t.offset)
      fail(source, ": tensor '", name, "' spans bytes [", t.offset, ", ", t.offset + t.bytes, ") of ", data_bytes,
           " bytes of data");
    if (t.bytes > 0) ranges.emplace_back(t.offset, &t);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second->offset + ranges[i - 1].second->bytes)
      fail(source, ": tensors '", ranges[i - 1].second->name, "' and '", ranges[i].second->name, "' overlap");
  return g;
}

GgufFile::GgufFile(const std::string& path)
    : file_(MappedFile::open(path, "GGUF file")),
      data_(file_->data()),
      path_(path),
      contents_(parse_gguf(file_->data(), static_cast<size_t>(file_->size()), path)) {}

GgufFile::GgufFile(const uint8_t* data, size_t size, const std::string& source)
    : data_(data), path_(source), contents_(parse_gguf(data, size, source)) {}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = contents_.metadata.find(key);
  return it == contents_.metadata.end() ? nullptr : &it->second;
}

int64_t GgufFile::integer(const std::string& key, bool required, int64_t fallback) const {
  const GgufValue* v = find(key);
  if (v == nullptr) {
    if (required) fail(path(), ": metadata '", key, "' is missing");
    return fallback;
  }
  switch (v->type) {
    case GgufValue::Type::u8: case GgufValue::Type::i8: case GgufValue::Type::u16: case GgufValue::Type::i16:
    case GgufValue::Type::u32: case GgufValue::Type::i32: case GgufValue::Type::u64: case GgufValue::Type::i64:
      return v->integer;
    default: fail(path(), ": metadata '", key, "' is ", value_type_name(uint32_t(v->type)), ", not an integer");
  }
}

double GgufFile::number(const std::string& key, bool required, double fallback) const {
  const GgufValue* v = find(key);
  if (v == nullptr) {
    if (required) fail(path(), ": metadata '", key, "' is missing");
    return fallback;
  }
  if (v->type == GgufValue::Type::f32 || v->type == GgufValue::Type::f64) return v->number;
  return static_cast<double>(integer(key, true, 0));
}

std::string GgufFile::text(const std::string& key, bool required, const std::string& fallback) const {
  const GgufValue* v = find(key);
  if (v == nullptr) {
    if (required) fail(path(), ": metadata '", key, "' is missing");
    return fallback;
  }
  if (v->type != GgufValue::Type::string) fail(path(), ": metadata '", key, "' is not a string");
  return v->text;
}

Tensor GgufFile::view(const std::string& name) const {
  auto it = contents_.tensors.find(name);
  MINFER_CHECK(it != contents_.tensors.end(), path(), ": no tensor '", name, "'");
  const GgufTensorInfo& t = it->second;
  DType dtype;
  if (!dtype_of_ggml_type(t.type, &dtype))
    fail(path(), ": tensor '", name, "' is ", ggml_type_name(t.type), "; minfer reads ", kReadableTypes, " tensors");
  std::vector<int64_t> shape(t.dims.rbegin(), t.dims.rend());
  const uint64_t start = contents_.data_offset + t.offset;
  const uint64_t align = is_quantized(dtype) ? 2 : dtype_bytes(dtype, 1);  // blocks: their f16 scales
  if (start % align != 0) fail(path(), ": tensor '", name, "' is not aligned to its ", align, "-byte elements");
  auto* bytes = const_cast<uint8_t*>(data_ + start);
  return Tensor::wrap(bytes, shape, dtype, DeviceKind::cpu, file_);
}

}  // namespace minfer
