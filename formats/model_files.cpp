#include "formats/model_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "core/error.h"
#include "core/files.h"
#include "formats/checkpoint.h"
#include "formats/gguf_model.h"
#include "formats/hf_model.h"

namespace minfer {

ModelFormat detect_model_format(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return ModelFormat::huggingface;
  InputFile file(path, "model");  // refuses what is missing or not a regular file, with the reason
  char magic[4] = {};
  if (file.size() >= 4 && ::pread(file.fd(), magic, 4, 0) == 4 && std::memcmp(magic, "GGUF", 4) == 0)
    return ModelFormat::gguf;
  const std::string suffix = ".safetensors";
  if (path.size() > suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0)
    return ModelFormat::huggingface;
  return ModelFormat::llama2c;
}

LlamaHostWeights load_model_weights(const std::string& path) {
  switch (detect_model_format(path)) {
    case ModelFormat::huggingface: return load_hf_weights(path);
    case ModelFormat::gguf: return load_gguf_weights(path);
    case ModelFormat::llama2c: break;
  }
  return load_checkpoint(path);
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_regular_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::unique_ptr<TextTokenizer> load_model_tokenizer(const std::string& spec) {
  if (spec.rfind("preset:", 0) == 0) return nullptr;
  switch (detect_model_format(spec)) {
    case ModelFormat::huggingface: {
      struct stat st;
      const bool folder = ::stat(spec.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
      const std::string dir = folder ? spec : spec.substr(0, spec.rfind('/') == std::string::npos ? 0 : spec.rfind('/'));
      const std::string json = (dir.empty() ? std::string(".") : dir) + "/tokenizer.json";
      return is_regular_file(json) ? load_tokenizer_json(json) : nullptr;
    }
    case ModelFormat::gguf:
      if (!gguf_has_vocab(spec)) return nullptr;
      return make_gguf_tokenizer(read_gguf_vocab(spec), spec);
    case ModelFormat::llama2c: break;
  }
  return nullptr;
}

std::unique_ptr<TextTokenizer> load_tokenizer_file(const std::string& path) {
  if (ends_with(path, ".json")) return load_tokenizer_json(path);
  InputFile file(path, "tokenizer");
  char magic[4] = {};
  if (file.size() >= 4 && ::pread(file.fd(), magic, 4, 0) == 4 && std::memcmp(magic, "GGUF", 4) == 0) {
    MINFER_CHECK(gguf_has_vocab(path), path, ": this GGUF file has no tokenizer (no tokenizer.ggml.tokens)");
    return make_gguf_tokenizer(read_gguf_vocab(path), path);
  }
  return load_llama2c_tokenizer(path);
}

std::unique_ptr<LlamaModel> load_model(const std::string& spec, Backend& backend, const LlamaOptions& options) {
  MINFER_CHECK(!options.dtype || options.dtype->base != DType::i32, "weights must be of a float or quantized type");
  auto check_fits = [&](const LlamaConfig& c, const WeightTypes& dtype) {
    check_memory_fits(backend, LlamaModel::weight_bytes(c, dtype), spec + " (" + dtype.name() + " weights)");
  };
  if (spec.rfind("preset:", 0) == 0) {
    LlamaConfig config = find_preset(spec.substr(7)).config;
    if (options.preset_ctx > 0) {
      MINFER_CHECK(options.preset_ctx <= (int64_t(1) << 20), "a context of ", options.preset_ctx, " positions is past 2^20");
      config.n_ctx = options.preset_ctx;
    }
    check_fits(config, options.dtype.value_or(WeightTypes(DType::f32)));
    return std::make_unique<LlamaModel>(backend, config, spec, options);
  }
  MINFER_CHECK(options.preset_ctx == 0, spec, ": the context of a model file is its own; only presets take another");
  MINFER_CHECK(!options.dtype || !is_k_quant(options.dtype->base), spec, ": ", options.dtype->name(),
               " weights are read from GGUF files, not made at load (llama.cpp's llama-quantize makes them; presets take "
               "them as random blocks)");
  LlamaHostWeights weights = load_model_weights(spec);
  check_memory_fits(backend, LlamaModel::weight_bytes(weights, options.dtype),
                    spec + " (" + (options.dtype ? options.dtype->name() : "stored") + " weights)");
  return std::make_unique<LlamaModel>(backend, weights, spec, options);
}

}  // namespace minfer
