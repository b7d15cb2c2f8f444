// load_tokenizer_json's parser on text already in memory (the fuzzer feeds it directly).
#pragma once

#include <memory>
#include <string>

#include "tokenizers/text_tokenizer.h"

namespace minfer {

// `source` names the text in errors; tokenizer_config.json, special_tokens_map.json and
// generation_config.json are looked for in `config_dir` unless it is empty.
std::unique_ptr<TextTokenizer> parse_tokenizer_json(const std::string& text, const std::string& source,
                                                    const std::string& config_dir);

}  // namespace minfer
