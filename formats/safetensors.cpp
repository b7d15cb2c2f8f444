#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/checked.h"
#include "core/error.h"

namespace minfer {

namespace {

constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;  // the format's own limit

// The bytes of one element of a dtype safetensors names; 0 for one minfer cannot read.
uint64_t element_bytes(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

}  // namespace

SafetensorsHeader parse_safetensors(const uint8_t* data, size_t size, const std::string& source) {
  if (size < 8) fail(source, ": ", size, " bytes, too short for a safetensors header");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, data, 8);
  if (header_bytes < 2 || header_bytes > kMaxHeaderBytes)
    fail(source, ": header length ", header_bytes, " is outside [2, ", kMaxHeaderBytes, "]");
  if (header_bytes > size - 8)
    fail(source, ": header length ", header_bytes, " runs past the end of the ", size, "-byte file");
  SafetensorsHeader header;
  header.data_offset = 8 + header_bytes;
  const uint64_t data_bytes = size - header.data_offset;
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(data + 8, data + header.data_offset);
  } catch (const nlohmann::json::exception& e) {
    fail(source, ": the header is not valid JSON (", e.what(), ")");
  }
  if (!doc.is_object()) fail(source, ": the header is not a JSON object");
  std::vector<std::pair<uint64_t, std::string>> ranges;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const nlohmann::json& t = it.value();
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets") ||
        !t["dtype"].is_string() || !t["shape"].is_array() || !t["data_offsets"].is_array() ||
        t["data_offsets"].size() != 2)
      fail(source, ": tensor '", name, "' needs \"dtype\", \"shape\" and two \"data_offsets\"");
    SafetensorsEntry e;
    e.dtype = t["dtype"].get<std::string>();
    const uint64_t bytes_per = element_bytes(e.dtype);
    if (bytes_per == 0) fail(source, ": tensor '", name, "' has an unknown dtype '", e.dtype, "'");
    if (t["shape"].size() > 8) fail(source, ": tensor '", name, "' has ", t["shape"].size(), " dimensions");
    uint64_t elements = 1;
    for (const auto& d : t["shape"]) {
      if (!d.is_number_unsigned()) fail(source, ": tensor '", name, "' has a shape that is not made of counts");
      const uint64_t extent = d.get<uint64_t>();
      if (extent > (uint64_t(1) << 40)) fail(source, ": tensor '", name, "' has a dimension of ", extent);
      elements = checked_mul(elements, extent, "safetensors tensor size");
      e.shape.push_back(static_cast<int64_t>(extent));
    }
    for (const auto& o : t["data_offsets"])
      if (!o.is_number_unsigned()) fail(source, ": tensor '", name, "' has offsets that are not byte counts");
    e.begin = t["data_offsets"][0].get<uint64_t>();
    e.end = t["data_offsets"][1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_bytes)
      fail(source, ": tensor '", name, "' spans bytes [", e.begin, ", ", e.end, ") of ", data_bytes, " bytes of data");
    const uint64_t expected = checked_mul(elements, bytes_per, "safetensors tensor size");
    if (e.end - e.begin != expected)
      fail(source, ": tensor '", name, "' of ", elements, " ", e.dtype, " elements needs ", expected, " bytes, its offsets give ",
           e.end - e.begin);
    if ((header.data_offset + e.begin) % bytes_per != 0)
      fail(source, ": tensor '", name, "' starts at a byte not aligned to its ", bytes_per, "-byte elements");
    if (e.end > e.begin) ranges.emplace_back(e.begin, name);
    header.tensors.emplace(name, std::move(e));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    const SafetensorsEntry& previous = header.tensors.at(ranges[i - 1].second);
    if (ranges[i].first < previous.end)
      fail(source, ": tensors '", ranges[i - 1].second, "' and '", ranges[i].second, "' overlap");
  }
  return header;
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : file_(MappedFile::open(path, "safetensors file")),
      header_(parse_safetensors(file_->data(), static_cast<size_t>(file_->size()), path)) {}

Tensor SafetensorsFile::view(const std::string& name) const {
  auto it = header_.tensors.find(name);
  MINFER_CHECK(it != header_.tensors.end(), file_->path(), ": no tensor '", name, "'");
  const SafetensorsEntry& e = it->second;
  DType dtype = DType::f32;
  if (e.dtype == "F16") dtype = DType::f16;
  else if (e.dtype == "BF16") dtype = DType::bf16;
  else if (e.dtype != "F32")
    fail(file_->path(), ": tensor '", name, "' is ", e.dtype, "; minfer reads F32, F16 and BF16 weights");
  MINFER_CHECK(!e.shape.empty() && e.shape.size() <= size_t(Tensor::kMaxDims), file_->path(), ": tensor '", name,
               "' has ", e.shape.size(), " dimensions");
  auto* bytes = const_cast<uint8_t*>(file_->data() + header_.data_offset + e.begin);
  return Tensor::wrap(bytes, e.shape, dtype, DeviceKind::cpu, file_);
}

}  // namespace minfer
