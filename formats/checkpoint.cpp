#include "formats/checkpoint.h"


#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/checked.h"
#include "core/error.h"
#include "core/files.h"
#include "core/splitmix.h"
#include "kernels/ref/rope.h"

namespace minfer {

namespace {

constexpr uint32_t kV1Magic = 0x616b3432u;  // "ak42" in little-endian
constexpr uint64_t kV0HeaderBytes = 7 * 4;
constexpr uint64_t kV1HeaderBytes = 256;

int32_t read_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The float count of each weight, in file order for the given format.
struct Sizes {
  uint64_t embedding, rms, wq, wkv, wo, w13, w2, rms_final, rope, classifier;
};

Sizes weight_sizes(const LlamaConfig& c) {
  const char* what = "checkpoint size";
  uint64_t d = c.dim, h = c.hidden_dim, kv = c.kv_dim(), L = c.n_layers, V = c.vocab_size;
  Sizes s{};
  s.embedding = checked_mul(V, d, what);
  s.rms = checked_mul(L, d, what);
  s.wq = checked_product({L, d, d}, what);
  s.wkv = checked_product({L, kv, d}, what);
  s.wo = s.wq;
  s.w13 = checked_product({L, h, d}, what);
  s.w2 = s.w13;
  s.rms_final = d;
  s.rope = checked_mul(static_cast<uint64_t>(c.n_ctx), static_cast<uint64_t>(c.head_dim()), what);
  s.classifier = c.shared_classifier ? 0 : s.embedding;
  return s;
}

uint64_t total_floats(const Sizes& s, CheckpointFormat format) {
  const char* what = "checkpoint size";
  uint64_t n = 0;
  for (uint64_t part : {s.embedding, s.rms, s.wq, s.wkv, s.wkv, s.wo, s.rms, s.w13, s.w2, s.w13,
                        s.rms_final, s.classifier})
    n = checked_add(n, part, what);
  if (format == CheckpointFormat::v0) n = checked_add(n, s.rope, what);
  return n;
}

}  // namespace

uint64_t checkpoint_bytes(const LlamaConfig& c, CheckpointFormat format) {
  const uint64_t header = format == CheckpointFormat::v1 ? kV1HeaderBytes : kV0HeaderBytes;
  const uint64_t floats = total_floats(weight_sizes(c), format);
  return checked_add(header, checked_mul(floats, 4, "checkpoint size"), "checkpoint size");
}

CheckpointLayout parse_checkpoint(const uint8_t* data, size_t size, const std::string& source) {
  CheckpointLayout layout;
  if (size < 4) fail(source, ": file is ", size, " bytes, too short for a checkpoint header");
  uint32_t magic;
  std::memcpy(&magic, data, 4);
  int32_t fields[7];
  if (magic == kV1Magic) {
    layout.format = CheckpointFormat::v1;
    layout.header_bytes = kV1HeaderBytes;
    if (size < kV1HeaderBytes)
      fail(source, ": file is ", size, " bytes, shorter than the 256-byte v1 header");
    int32_t version = read_i32(data + 4);
    if (version != 1)
      fail(source, ": checkpoint version = ", version,
           ", only version 1 (float32) of the magic-numbered format is supported");
    for (int i = 0; i < 7; ++i) fields[i] = read_i32(data + 8 + 4 * i);
    uint8_t shared = data[36];
    if (shared > 1) fail(source, ": shared_classifier = ", int(shared), ", must be 0 or 1");
    layout.config.shared_classifier = shared == 1;
  } else {
    layout.format = CheckpointFormat::v0;
    layout.header_bytes = kV0HeaderBytes;
    if (size < kV0HeaderBytes)
      fail(source, ": file is ", size, " bytes, shorter than the 28-byte v0 header");
    for (int i = 0; i < 7; ++i) fields[i] = read_i32(data + 4 * i);
    // A negative vocab_size marks a separate classifier; INT32_MIN has no positive counterpart.
    if (fields[5] < 0 && fields[5] != INT32_MIN) {
      fields[5] = -fields[5];
      layout.config.shared_classifier = false;
    }
  }
  LlamaConfig& c = layout.config;
  c.dim = fields[0];
  c.hidden_dim = fields[1];
  c.n_layers = fields[2];
  c.n_heads = fields[3];
  c.n_kv_heads = fields[4];
  c.vocab_size = fields[5];
  c.n_ctx = fields[6];
  c.validate(source);
  layout.file_bytes = checkpoint_bytes(c, layout.format);
  if (layout.file_bytes != size)
    fail(source, ": file is ", size, " bytes but its header (", c.describe(), ") implies ",
         layout.file_bytes, " bytes");
  return layout;
}

LlamaHostWeights view_checkpoint(const uint8_t* data, const CheckpointLayout& layout,
                                 std::shared_ptr<void> owner) {
  const LlamaConfig& c = layout.config;
  const Sizes s = weight_sizes(c);
  auto* base = reinterpret_cast<float*>(const_cast<uint8_t*>(data) + layout.header_bytes);
  uint64_t offset = 0;
  auto next = [&](uint64_t count, std::vector<int64_t> shape) {
    Tensor t = Tensor::wrap(base + offset, shape, DType::f32, DeviceKind::cpu, owner);
    offset += count;
    return t;
  };
  const int64_t L = c.n_layers, d = c.dim, h = c.hidden_dim, kv = c.kv_dim(), V = c.vocab_size;
  LlamaHostWeights w;
  w.config = c;
  w.owner = owner;
  w.layers.resize(static_cast<size_t>(L));
  // The file stacks each kind of weight over the layers: (L, ...) per kind, one view per layer.
  auto per_layer = [&](uint64_t count, std::vector<int64_t> shape, Tensor LlamaHostWeights::Layer::*field) {
    Tensor all = next(count, shape);
    for (int64_t l = 0; l < L; ++l) w.layers[l].*field = all.select(0, l);
  };
  using Layer = LlamaHostWeights::Layer;
  if (layout.format == CheckpointFormat::v1) {
    per_layer(s.rms, {L, d}, &Layer::rms_att);
    per_layer(s.rms, {L, d}, &Layer::rms_ffn);
    w.rms_final = next(s.rms_final, {d});
    w.token_embedding = next(s.embedding, {V, d});
  } else {
    w.token_embedding = next(s.embedding, {V, d});
    per_layer(s.rms, {L, d}, &Layer::rms_att);
  }
  per_layer(s.wq, {L, d, d}, &Layer::wq);
  per_layer(s.wkv, {L, kv, d}, &Layer::wk);
  per_layer(s.wkv, {L, kv, d}, &Layer::wv);
  per_layer(s.wo, {L, d, d}, &Layer::wo);
  if (layout.format == CheckpointFormat::v0) per_layer(s.rms, {L, d}, &Layer::rms_ffn);
  per_layer(s.w13, {L, h, d}, &Layer::w1);
  per_layer(s.w2, {L, d, h}, &Layer::w2);
  per_layer(s.w13, {L, h, d}, &Layer::w3);
  if (layout.format == CheckpointFormat::v0) {
    w.rms_final = next(s.rms_final, {d});
    offset += s.rope;  // freq_cis_real and freq_cis_imag: minfer computes its own RoPE table
  }
  w.classifier = c.shared_classifier ? w.token_embedding : next(s.classifier, {V, d});
  return w;
}

LlamaHostWeights load_checkpoint(const std::string& path) {
  auto file = MappedFile::open(path, "checkpoint");
  CheckpointLayout layout = parse_checkpoint(file->data(), file->size(), path);
  LlamaHostWeights w = view_checkpoint(file->data(), layout, file);
  w.header_digest = digest_bytes(file->data(), layout.header_bytes, layout.file_bytes);
  w.release = [file](const Tensor& t) { file->drop(t.data(), t.nbytes()); };
  return w;
}

namespace {

using Layer = LlamaHostWeights::Layer;

void write_tensor(AtomicFile& out, const Tensor& t) {
  MINFER_CHECK(t.dtype() == DType::f32 && t.is_contiguous() && t.device() == DeviceKind::cpu,
               "write_checkpoint needs contiguous host f32 tensors, got ", t.str());
  out.write(t.data(), t.nbytes());
}

// One kind of weight for every layer, stacked as llama2.c stores it.
void write_layers(AtomicFile& out, const LlamaHostWeights& w, Tensor Layer::*field) {
  for (const Layer& layer : w.layers) write_tensor(out, layer.*field);
}

}  // namespace

void write_checkpoint(const std::string& path, const LlamaHostWeights& w, CheckpointFormat format) {
  const LlamaConfig& c = w.config;
  c.validate("write_checkpoint");
  MINFER_CHECK(c.head_size == 0 || c.head_size == c.dim / c.n_heads, "write_checkpoint: llama2.c files have heads of ",
               "dim / n_heads, not ", c.head_size);
  MINFER_CHECK(!w.rotate_half, "write_checkpoint: q and k must be in interleaved RoPE order");
  MINFER_CHECK(c.rope_theta == 10000.0 && c.rope_scaling.type == RopeScaling::Type::none && c.rms_eps == 1e-5f,
               "write_checkpoint: a llama2.c file has RoPE theta 10000, no scaling and RMSNorm epsilon 1e-5");
  MINFER_CHECK(int64_t(w.layers.size()) == c.n_layers, "write_checkpoint: ", w.layers.size(), " layers for ", c.n_layers);
  AtomicFile out(path, checkpoint_bytes(c, format));
  int32_t fields[7] = {int32_t(c.dim), int32_t(c.hidden_dim), int32_t(c.n_layers),
                       int32_t(c.n_heads), int32_t(c.n_kv_heads), int32_t(c.vocab_size),
                       int32_t(c.n_ctx)};
  if (format == CheckpointFormat::v1) {
    uint8_t header[kV1HeaderBytes] = {};
    int32_t version = 1;
    std::memcpy(header, &kV1Magic, 4);
    std::memcpy(header + 4, &version, 4);
    std::memcpy(header + 8, fields, sizeof(fields));
    header[36] = c.shared_classifier ? 1 : 0;
    out.write(header, sizeof(header));
    write_layers(out, w, &Layer::rms_att);
    write_layers(out, w, &Layer::rms_ffn);
    write_tensor(out, w.rms_final);
    write_tensor(out, w.token_embedding);
    for (auto field : {&Layer::wq, &Layer::wk, &Layer::wv, &Layer::wo, &Layer::w1, &Layer::w2, &Layer::w3})
      write_layers(out, w, field);
  } else {
    if (!c.shared_classifier) fields[5] = -fields[5];
    out.write(fields, sizeof(fields));
    write_tensor(out, w.token_embedding);
    for (auto field : {&Layer::rms_att, &Layer::wq, &Layer::wk, &Layer::wv, &Layer::wo, &Layer::rms_ffn, &Layer::w1,
                       &Layer::w2, &Layer::w3})
      write_layers(out, w, field);
    write_tensor(out, w.rms_final);
    // llama2.c's freq_cis tables, (n_ctx, head_dim / 2) of cosines then of sines: run.c skips
    // them and so does minfer, but they are written with the values export.py writes so that the
    // file is a faithful v0 checkpoint. A position at a time: a long context costs no memory.
    const int64_t half = c.head_dim() / 2;
    std::vector<float> row(static_cast<size_t>(2 * half)), part(static_cast<size_t>(half));
    std::vector<float> inv_freq(static_cast<size_t>(half));
    ref::rope_inv_freq_default(inv_freq.data(), c.head_dim());
    for (int parity = 0; parity < 2; ++parity)
      for (int64_t p = 0; p < c.n_ctx; ++p) {
        ref::rope_table_row(row.data(), p, inv_freq.data(), c.head_dim());
        for (int64_t j = 0; j < half; ++j) part[j] = row[2 * j + parity];
        out.write(part.data(), part.size() * sizeof(float));
      }
  }
  if (!c.shared_classifier) write_tensor(out, w.classifier);
  out.commit();
}

}  // namespace minfer
