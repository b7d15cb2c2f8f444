// GGUF, llama.cpp's model format (versions 2 and 3): "GGUF", the version, the tensor and
// metadata counts, metadata as typed key-value pairs, tensor infos (name, dimensions with the
// fastest-varying first, ggml type, offset), padding to general.alignment (32 by default), and
// the tensor data. Read by mapping the file: a tensor is a view of its bytes.
//
// Every count, length and offset is checked against the bytes left before it is used: strings
// and arrays cannot claim more than the file holds, dimensions and sizes are overflow-checked,
// tensors must lie inside the data, aligned, without overlapping. A malformed file is refused with
// one line naming the file, and the key or tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/files.h"
#include "core/splitmix.h"
#include "core/tensor.h"

namespace minfer {

struct GgufValue {
  // GGUF's value types, by their numbers in the file.
  enum class Type : uint32_t { u8, i8, u16, i16, u32, i32, f32, boolean, string, array, u64, i64, f64 };
  Type type = Type::u32;
  Type element = Type::u32;          // of an array
  int64_t integer = 0;               // any integer type (u64 above 2^63 is refused)
  double number = 0.0;               // f32, f64
  bool boolean = false;
  std::string text;                  // string
  std::vector<std::string> strings;  // array of strings
  std::vector<double> numbers;       // array of numbers (integers are exact up to 2^53)
};

// ggml's tensor types minfer reads (the numbers are the file's).
enum class GgmlType : uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8,
  q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14, bf16 = 30
};
constexpr std::pair<GgmlType, DType> kGgmlTypes[] = {
    {GgmlType::f32, DType::f32},   {GgmlType::f16, DType::f16},   {GgmlType::bf16, DType::bf16},
    {GgmlType::q4_0, DType::q4_0}, {GgmlType::q4_1, DType::q4_1}, {GgmlType::q5_0, DType::q5_0},
    {GgmlType::q5_1, DType::q5_1}, {GgmlType::q8_0, DType::q8_0}, {GgmlType::q2_k, DType::q2_k},
    {GgmlType::q3_k, DType::q3_k}, {GgmlType::q4_k, DType::q4_k}, {GgmlType::q5_k, DType::q5_k},
    {GgmlType::q6_k, DType::q6_k}};
constexpr const char* kReadableTypes = "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K";
// The minfer type of a ggml type number; false for the types minfer does not read (I8, IQ2_XXS, ...).
bool dtype_of_ggml_type(uint32_t type, DType* out);
uint32_t ggml_type_of(DType dtype);  // Error for i32
const char* ggml_type_name(uint32_t type);  // "Q4_K" for 12, ...

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] varies fastest (a matrix is {in, out})
  uint32_t type = 0;
  uint64_t offset = 0;        // from the start of the data
  uint64_t bytes = 0;
};

struct GgufContents {
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;
  std::map<std::string, GgufValue> metadata;
  std::map<std::string, GgufTensorInfo> tensors;
};

// Parses and validates a GGUF file held in data[0, size).
GgufContents parse_gguf(const uint8_t* data, size_t size, const std::string& source);

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);
  // A GGUF image in memory that outlives this object (the fuzzer's input); `source` names it.
  GgufFile(const uint8_t* data, size_t size, const std::string& source);
  const GgufContents& contents() const { return contents_; }
  const std::string& path() const { return path_; }
  const GgufValue* find(const std::string& key) const;
  // Typed metadata; Error naming the key when it is missing (required) or of the wrong type.
  int64_t integer(const std::string& key, bool required, int64_t fallback) const;
  double number(const std::string& key, bool required, double fallback) const;
  std::string text(const std::string& key, bool required, const std::string& fallback) const;
  bool has_tensor(const std::string& name) const { return contents_.tensors.count(name) > 0; }
  // A host view with minfer's shape (dimensions reversed: a matrix is (out, in)); the types of
  // kGgmlTypes only, any other type refused by name.
  Tensor view(const std::string& name) const;
  // digest_bytes of the bytes before the tensor data: the header, the metadata, the tensor table.
  uint64_t header_digest() const { return digest_bytes(data_, contents_.data_offset); }
  // Gives back the file pages of a tensor once copied (nothing for an image in memory).
  void drop(const Tensor& t) const {
    if (file_) file_->drop(t.data(), t.nbytes());
  }

 private:
  std::shared_ptr<MappedFile> file_;  // null for an image in memory
  const uint8_t* data_;
  std::string path_;
  GgufContents contents_;
};

}  // namespace minfer
