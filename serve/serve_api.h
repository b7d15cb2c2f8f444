// The OpenAI-style completions API of `minfer serve`, without the HTTP: what a request may say
// and how it is refused, the JSON of errors, and each request's cache scope (the text of an answer
// as its tokens come: serve/completion_text.h; the JSON of answers and /metrics: serve/answer_json.h).
// The HTTP layer (serve/serve_http.cpp) moves bytes; everything a client can get wrong is decided here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/scheduler.h"
#include "serve/answer_json.h"
#include "serve/completion_text.h"
#include "serve/structured_output.h"
#include "serve/tool_calls.h"
#include "tokenizers/chat_template.h"
#include "tokenizers/text_tokenizer.h"

namespace minfer::serve {

// A request the server refuses: the HTTP status and OpenAI's error object
// {"error": {"message", "type", "param", "code"}}. The message is one line.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // the request field at fault, "" when none
  std::string code;   // a short machine-readable reason ("queue_full"), "" when none
};
// OpenAI's error type for a status: "invalid_request_error" for 4xx, "rate_limit_error" for 429,
// "server_error" for 5xx.
const char* api_error_type(int status);
std::string error_body(const ApiError& error);  // the JSON text of the answer

// The limits of the server (minfer serve's options), checked for every request.
struct ApiLimits {
  int64_t max_prompt_tokens = 0;  // --max-prompt-tokens
  int64_t max_tokens_limit = 0;   // --max-tokens-limit
};

// POST /v1/completions and /v1/chat/completions, as parsed: OpenAI's fields that minfer
// implements. Anything else that would change the answer (best_of, suffix; for
// chats functions, audio, ...) is
// refused rather than ignored, as is any field minfer does not know; `user` (a string of at most
// 256 bytes; and a chat's metadata and service_tier), which change nothing, are accepted.
struct CompletionRequest {
  std::optional<std::string> model;    // echoed in the answer
  std::optional<std::string> text;     // the prompt as text ...
  std::vector<int32_t> prompt_ids;     // ... or as token ids
  bool chat = false;                   // /v1/chat/completions: the prompt is ...
  std::vector<ChatMessage> messages;   // ... these messages in the model's chat template
  int64_t max_tokens = 16;            // a chat without it: until the end of the turn (see chat_max_tokens)
  bool max_tokens_given = false;
  float temperature = 1.0f;            // 0: greedy
  float top_p = 1.0f;
  // top_k (-1 or 0: off), min_p, presence_penalty and frequency_penalty in [-2, 2],
  // repetition_penalty in (0, 1e6], logit_bias (at most 300 ids, each bias in [-100, 100])
  SamplingOptions sampling;
  // The logprobs of each generated token with this many of the most likely tokens' (chat: logprobs
  // true and top_logprobs 0 to 20; completions: logprobs 0 to 5); -1: none (engine/logprobs.h)
  int top_logprobs = -1;
  // /v1/completions' echo: the prompt's text before the completion's, and with logprobs the prompt's
  // tokens first (the first one's logprob null); a stream's first event of each choice is the
  // prompt's. max_tokens may be 0 with it.
  bool echo = false;
  std::optional<uint64_t> seed;        // the sampler's state: never 0 (see sampler_seed)
  std::vector<std::string> stop;       // up to 4 non-empty strings
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage: a last event with usage only
  bool ignore_eos = false;             // keep going past the model's end tokens (vLLM's and llama.cpp's extension)
  // response_format json_object or json_schema, or the extensions grammar (EBNF) and regex (vLLM's
  // and llama-server's): what the answer must be (serve/structured_output.h); unset: any text.
  std::optional<OutputConstraint> output;
  std::optional<ToolRequest> tools;  // a chat's tools, tool_choice and parallel_tool_calls (serve/tool_calls.h)
  std::optional<std::string> cache_salt;  // 1 to kMaxCacheSaltBytes bytes: a cache scope of its own (vLLM's field)
  int64_t n = 1;                       // choices, 1 to kMaxChoices: each a request of the scheduler's (see choice_seed)
};
// Refuses (400, param logit_bias) a logit_bias id outside [0, vocab_size): the chat route's parser
// does not know the vocabulary.
void check_logit_bias(const CompletionRequest& request, int64_t vocab_size);
// The sampler's state for a request's `seed`, any 64-bit integer as OpenAI's API takes it: the
// seed itself (so that seed S draws what `minfer generate --seed S` draws), a negative one as its
// two's complement, and 0, which would stick run.c's xorshift at 0, as kSeedZeroState.
constexpr uint64_t kSeedZeroState = 0x9E3779B97F4A7C15ull;
uint64_t sampler_seed(const nlohmann::json& seed);
// `n` asks for up to kMaxChoices choices of one prompt. Each is a request of the scheduler's: it
// takes a place of the queue (--max-queue), shares the prompt's blocks (prefix caching: the prompt
// is computed once) and samples with its own generator, choice i with the sampler's state
// choice_seed(seed, i): seed + i, wrapping at 2^64, 0 as kSeedZeroState. So choice i of seed S
// draws what n = 1 with seed S + i draws (S = 0 draws as kSeedZeroState, its choice i as
// kSeedZeroState + i).
constexpr int64_t kMaxChoices = 8;
uint64_t choice_seed(uint64_t seed, int64_t index);
// Parses the body; throws ApiError naming the field on malformed JSON or a wrong type or value.
// `vocab_size` bounds id prompts; `has_tokenizer` says whether text prompts and stop strings can
// be served. Does not encode the text (the caller does, then calls check_prompt_length).
CompletionRequest parse_completion_request(const std::string& body, int64_t vocab_size, bool has_tokenizer,
                                           const ApiLimits& limits);
// A request's body as a JSON object, nested at most 64 deep; throws ApiError (400) for anything else.
nlohmann::json parse_request_body(const std::string& body);
// POST /v1/chat/completions: `messages` (roles system, developer as system, user, assistant, tool;
// the content a string or text parts; an assistant's tool_calls, a tool's tool_call_id) instead of a
// prompt; max_completion_tokens as max_tokens; tools, tool_choice and parallel_tool_calls
// (serve/tool_calls.h).
CompletionRequest parse_chat_request(const std::string& body, const ApiLimits& limits);
// A chat's max_tokens when the request gives none: as OpenAI's API, the answer runs to the end of
// its turn, so as far as the context (n_ctx positions) and the server's --max-tokens-limit allow.
int64_t chat_max_tokens(int64_t prompt_tokens, int64_t n_ctx, const ApiLimits& limits);
void check_prompt_length(int64_t prompt_tokens, const ApiLimits& limits);
// The refusal of a text prompt (`param` "prompt") or a chat's messages ("messages") that the
// tokenizer found over --max-prompt-tokens (TextTokenizer::encode with max_ids): by its bytes,
// before encoding, or as its ids passed the limit.
ApiError prompt_over_limit(const TooManyTokens& e, const std::string& param, const ApiLimits& limits);

// Prefix caching's tenants (ServeRequest::cache_scope). A request finds only cached blocks of its
// own scope: that of its API key (the bearer token of `authorization`, "" when none; the server
// has checked it before) and of its cache_salt, hashed together keyed with `secret`. Without
// either, the scope is 0, shared by every such request. The hash (splitmix64's finalizer over
// 8-byte words, keyed by a secret drawn at start-up by draw_cache_secret) is not a cryptographic
// MAC, but no scope is ever shown to a client, and the only test a client has of one is a cache
// hit: to reach another tenant's blocks it must send that tenant's key and salt, or find one of
// 2^64 scopes blind.
// The token of `Authorization: Bearer TOKEN` (the scheme's name in any case: RFC 9110, 11.1), a view
// into `authorization`; "" for anything else.
std::string_view bearer_token(const std::string& authorization);
constexpr size_t kMaxCacheSaltBytes = 256;
uint64_t cache_scope(uint64_t secret, const std::string& authorization, const std::optional<std::string>& salt);
uint64_t draw_cache_secret();  // from std::random_device
// What a client is told of the prompt tokens it found cached (usage's prompt_tokens_details.
// cached_tokens): whole blocks of `block_size` only, as OpenAI's API reports them in steps of 128
// tokens (from 1024). The rows a request copies from a partly matching block are not told, so a
// match of one more token is not seen unless it completes a block.
int64_t client_cached_tokens(int64_t cached_tokens, int64_t block_size);

// A client's text inside a one-line message: control characters become spaces, and it is cut
// short after `max_bytes`.
std::string one_line(const std::string& text, size_t max_bytes = 160);

}  // namespace minfer::serve
