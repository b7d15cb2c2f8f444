// What `-m` names, whatever the format: the model's weights and, where the file carries one, its
// tokenizer. The format is read from the path and the file's first bytes, never from a flag:
//   a folder                       a Hugging Face model (formats/hf_model.h)
//   a file starting with "GGUF"    a GGUF file (formats/gguf_model.h)
//   a file ending in .safetensors  one file of a Hugging Face model, config.json beside it
//   anything else                  a llama2.c checkpoint (formats/checkpoint.h)
// Presets ("preset:NAME") are not files; load_model builds them too.
#pragma once

#include <memory>
#include <string>

#include "engine/backend.h"
#include "model/llama.h"
#include "model/llama_weights.h"
#include "tokenizers/text_tokenizer.h"

namespace minfer {

enum class ModelFormat { llama2c, huggingface, gguf };
ModelFormat detect_model_format(const std::string& path);

LlamaHostWeights load_model_weights(const std::string& path);

// The model `spec` names, a file or folder as above or "preset:NAME" (model/presets.h), on the
// backend. Refuses, before allocating, a model whose weights do not fit in the backend's
// memory, stating the bytes needed and free.
std::unique_ptr<LlamaModel> load_model(const std::string& spec, Backend& backend, const LlamaOptions& options);

// The tokenizer a model carries: tokenizer.json in a Hugging Face folder (or beside a
// .safetensors file), a GGUF file's tokenizer.ggml.* vocabulary. nullptr when it has none (a
// llama2.c checkpoint, a preset, a GGUF file written without a vocabulary).
std::unique_ptr<TextTokenizer> load_model_tokenizer(const std::string& spec);

// A tokenizer named on its own (-z PATH): a tokenizer.json, a GGUF file's vocabulary, or
// llama2.c's tokenizer.bin, told apart by the name's suffix and the file's first bytes.
std::unique_ptr<TextTokenizer> load_tokenizer_file(const std::string& path);

}  // namespace minfer
