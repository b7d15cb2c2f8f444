// What `-m` names, whatever the format: the model's weights and, where the file carries one, its
// tokenizer. The format is read from the path and the file's first bytes, never from a flag:
//   a folder                       a Hugging Face model (models/hf_model.h)
//   a file starting with "GGUF"    a GGUF file (models/gguf_model.h)
//   a file ending in .safetensors  one file of a Hugging Face model, config.json beside it
//   anything else                  a llama2.c checkpoint (models/checkpoint.h)
// Presets ("preset:NAME") are not files and are handled by LlamaModel::load.
#pragma once

#include <memory>
#include <string>

#include "models/llama_weights.h"

namespace minfer {

enum class ModelFormat { llama2c, huggingface, gguf };
const char* model_format_name(ModelFormat f);
ModelFormat detect_model_format(const std::string& path);

LlamaHostWeights load_model_weights(const std::string& path);

}  // namespace minfer
