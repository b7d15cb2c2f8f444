#include "models/model_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "core/error.h"
#include "core/files.h"
#include "models/checkpoint.h"
#include "models/gguf_model.h"
#include "models/hf_model.h"

namespace minfer {

const char* model_format_name(ModelFormat f) {
  switch (f) {
    case ModelFormat::llama2c: return "llama2.c checkpoint";
    case ModelFormat::huggingface: return "Hugging Face safetensors";
    case ModelFormat::gguf: return "GGUF";
  }
  return "?";
}

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

}  // namespace minfer
