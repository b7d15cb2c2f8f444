// The `logprobs` of a choice, from each token's entries (engine/logprobs.h): on the chat route
// OpenAI's {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}],
// "refusal": null}; on /v1/completions its legacy {tokens, token_logprobs, top_logprobs (a dict of
// token text -> logprob per token), text_offset}. A token's text is its bytes after the token before
// it (TokenPieces), invalid UTF-8 as U+FFFD (`bytes` keeps them); text_offset counts the bytes of
// the tokens' texts before it, from the start of the completion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/logprobs.h"
#include "serve/serve_api.h"

namespace minfer::serve {

// ids[n] after the token `prev`, with entries[n * per_token]: each token's own entry, then its
// per_token - 1 most likely ones. *text_offset is where the first token's text starts, and is moved
// past the last one's (a stream's events carry on from each other).
nlohmann::ordered_json logprobs_json(bool chat, const TokenPieces& pieces, int32_t prev, const int32_t* ids, size_t n,
                                     const TokenLogprob* entries, size_t per_token, size_t* text_offset);

// /v1/completions with echo: the prompt's tokens first, the first one with null token_logprobs and
// top_logprobs (nothing comes before it), the others with prompt_entries[(prompt.size() - 1) *
// per_token]; then the completion's ids[n] with entries[n * per_token]. text_offset counts from the
// start of the prompt's text; *text_offset is set past the last token's (a stream's next events
// carry on from it).
nlohmann::ordered_json echo_logprobs_json(const TokenPieces& pieces, const std::vector<int32_t>& prompt,
                                          const TokenLogprob* prompt_entries, const int32_t* ids, size_t n,
                                          const TokenLogprob* entries, size_t per_token, size_t* text_offset);

}  // namespace minfer::serve
