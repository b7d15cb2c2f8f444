// safetensors, the Hugging Face weights format: an 8-byte little-endian header length N, N bytes
// of JSON mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// into the data after the header; "__metadata__" holds strings), then the data. Read by mapping
// the file: a tensor is a view of its bytes, nothing is copied until the model uploads it.
//
// Every number in the header is checked before use: the header length against the file and a
// 100 MB limit, each shape's element count times the dtype's size against its offsets (64-bit,
// overflow-checked), every range inside the data, no two tensors overlapping, offsets aligned to
// the dtype. A malformed file is refused with one line naming the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/files.h"
#include "core/tensor.h"

namespace minfer {

struct SafetensorsEntry {
  std::string dtype;            // as written: "F32", "BF16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range, relative to the data
};

struct SafetensorsHeader {
  uint64_t data_offset = 0;  // 8 + header length
  std::map<std::string, SafetensorsEntry> tensors;
};

// Parses and validates the header of a safetensors file held in data[0, size).
SafetensorsHeader parse_safetensors(const uint8_t* data, size_t size, const std::string& source);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const SafetensorsHeader& header() const { return header_; }
  bool has(const std::string& name) const { return header_.tensors.count(name) > 0; }
  // A host view of tensor `name` (F32, F16 or BF16; any other dtype is refused by name).
  Tensor view(const std::string& name) const;
  const std::shared_ptr<MappedFile>& file() const { return file_; }

 private:
  std::shared_ptr<MappedFile> file_;
  SafetensorsHeader header_;
};

}  // namespace minfer
