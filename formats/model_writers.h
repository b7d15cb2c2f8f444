// Writing host weights in the formats minfer reads, for `minfer make-model` and the tests:
// a Hugging Face folder (config.json, generation_config.json, model.safetensors, with q and k in
// the rotate-half order Hugging Face expects) and a GGUF v3 file under llama.cpp's names and
// metadata (q and k interleaved, as llama.cpp's converter leaves them). Every file is written
// whole or not at all (core/files.h). llama2.c checkpoints: formats/checkpoint.h.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "model/llama_weights.h"
#include "tokenizers/text_tokenizer.h"

namespace minfer {

// Matrices and the embedding in `dtype` (f32, f16, bf16), norms in f32.
void write_hf_folder(const std::string& folder, const LlamaHostWeights& weights, DType dtype);
// What a GGUF file may choose: general.alignment (a power of two: where the data and every tensor
// start) and general.name, whose length moves the end of the header, and so the padding before the
// data.
struct GgufLayout {
  uint32_t alignment = 32;
  std::string name = "minfer make-model";
};
// Matrices and the embedding in `dtype` (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0 or q5_1), norms in f32; `vocab` (may be null) goes into the
// tokenizer.ggml.* metadata, which llama.cpp needs to load the file.
void write_gguf(const std::string& path, const LlamaHostWeights& weights, DType dtype, const GgufVocab* vocab,
                const GgufLayout& layout = {});

}  // namespace minfer
