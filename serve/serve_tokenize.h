// POST /tokenize and POST /detokenize of `minfer serve`, in llama-server's request shape, without
// the HTTP (serve/serve_http.cpp moves the bytes and checks the API key first):
//   /tokenize    {"content": TEXT, "add_special": false, "parse_special": true, "with_pieces": false}
//                -> {"tokens": [ID, ...]}, or with_pieces {"tokens": [{"id": ID, "piece": PIECE}, ...]}.
//                add_special puts the tokenizer's own special tokens (BOS) around the text; parse_special
//                false reads special-token text such as "<|im_start|>" as the ordinary tokens of its
//                characters (TextTokenizer::encode_plain). A piece is the bytes its token adds to the
//                text, as `minfer tokenize --pieces` prints them: a string when they are valid UTF-8,
//                else the list of their byte values (a character split across tokens).
//   /detokenize  {"tokens": [ID, ...]} -> {"content": TEXT}, TextTokenizer::decode's text (special
//                tokens as their text).
// Bounds: a content of more than --max-prompt-tokens tokens is refused (by its length before it is
// encoded where the tokenizer allows, else as its ids pass the limit: TextTokenizer::encode's
// max_ids), and so is a list of more than --max-prompt-tokens + --max-tokens-limit ids (a prompt
// and its whole completion) or an id outside the tokenizer's vocabulary. Unknown fields are refused.
#pragma once

#include <string>

#include "serve/serve_api.h"
#include "tokenizers/text_tokenizer.h"

namespace minfer::serve {

// The answers' JSON text; throw ApiError (400, naming the field) for a request they refuse, and
// (400, code "no_tokenizer") when `tokenizer` is null: a server of token ids only.
std::string answer_tokenize(const std::string& body, const TextTokenizer* tokenizer, const ApiLimits& limits);
std::string answer_detokenize(const std::string& body, const TextTokenizer* tokenizer, const ApiLimits& limits);

}  // namespace minfer::serve
