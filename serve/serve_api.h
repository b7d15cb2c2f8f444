// The OpenAI-style completions API of `minfer serve`, without the HTTP: what a request may say
// and how it is refused, the JSON of answers and errors, stop strings, and /metrics' text. The
// HTTP layer (serve/serve_http.cpp) moves bytes; everything a client can get wrong is decided here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/scheduler.h"
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

// Stop strings found in the bytes of tokens as they come, on the engine's thread. Allocates only
// when made: the window holds the last (longest stop - 1) bytes plus one token's bytes, and its
// capacity is reserved for the longest token piece up front.
class StopMatcher {
 public:
  StopMatcher() = default;
  StopMatcher(std::vector<std::string> stops, size_t longest_piece);
  bool empty() const { return stops_.empty(); }
  // Appends the bytes of one token; true when the text now contains a stop string.
  bool push(const std::string& piece);

 private:
  std::vector<std::string> stops_;
  size_t keep_ = 0;  // bytes kept between tokens: the longest stop string - 1
  std::string window_;
};

// Where the text must be cut for the stop strings: the earliest position at which one begins
// (npos when none does), and, for streaming, how many bytes at the end of `text` could still be
// the start of one (to be held back until the next token decides).
size_t find_stop(const std::string& text, const std::vector<std::string>& stops);
size_t stop_prefix_at_end(const std::string& text, const std::vector<std::string>& stops);

// The bytes each token adds to a stream, computed once for the whole vocabulary so that the
// engine's thread can match stop strings without asking the tokenizer (whose token_bytes
// allocates). note: TextTokenizer::token_bytes(prev, id) depends on prev only through prev == -1
// (the start of a text) and prev == BOS (llama2.c's tokenizer drops the leading space after BOS),
// so two entries per token describe every stream that follows a prompt.
class TokenPieces {
 public:
  explicit TokenPieces(const TextTokenizer& tokenizer);
  // The bytes of `id` after `prev` (a token of the prompt or of the completion); empty for ids the
  // tokenizer does not know (models pad their vocabularies).
  const std::string& piece(int32_t prev, int32_t id) const;
  bool byte_fallback(int32_t id) const {  // TextTokenizer::byte_fallback
    return id >= 0 && static_cast<size_t>(id) < byte_fallback_.size() && byte_fallback_[static_cast<size_t>(id)];
  }
  size_t longest() const { return longest_; }

 private:
  std::vector<std::string> after_token_, after_bos_;  // after_bos_ is empty when it would equal after_token_
  std::vector<bool> byte_fallback_;
  int32_t bos_ = -1;
  size_t longest_ = 0;
  std::string none_;
};

// The text of a stream's events as its tokens come: each token's bytes after the token before it
// (the prompt's last token first, so that a leading space is kept and prompt + text reads as one
// text), in whole UTF-8 characters, cut before the first stop string. Bytes that could begin a
// stop string are held back until a later token decides. The events' texts add up to the whole
// answer's text (the tokenizer's decode), invalid bytes included: a run of byte-fallback tokens is
// held until it ends and then printed as decode prints it (its bytes, or one U+FFFD per token),
// other invalid bytes become one U+FFFD per maximal invalid sequence (utf8::lossy), and an event
// never ends inside a character the next token could still finish.
class CompletionText {
 public:
  CompletionText(const TokenPieces* pieces, int32_t prompt_last, std::vector<std::string> stops);
  // The text that token `id` makes final; once a stop string is complete (stopped()), the text
  // before it, and nothing from then on.
  std::string push(int32_t id);
  std::string finish();  // what was held back at the end (nothing after a stop string)
  bool stopped() const { return stopped_; }

 private:
  const TokenPieces* pieces_;
  int32_t prev_;
  std::string take(const std::string& bytes);  // through the UTF-8 and stop-string hold-backs
  std::string end_run();                       // the byte-fallback run so far, as decode prints it

  std::vector<std::string> stops_;
  Utf8Stream utf8_;
  std::string held_;
  std::string run_;  // the bytes of byte-fallback tokens not yet printed ...
  size_t run_tokens_ = 0;  // ... and how many tokens they came in
  bool stopped_ = false;
};

// A client's text inside a one-line message: control characters become spaces, and it is cut
// short after `max_bytes`.
std::string one_line(const std::string& text, size_t max_bytes = 160);

// The JSON of answers, fields in OpenAI's order. `created` is a Unix time; `model` the name echoed.
struct CompletionHeader {
  std::string id;  // "cmpl-N", "chatcmpl-N"
  bool chat = false;  // chat.completion objects: a message (a delta in a stream), not a text
  int64_t created = 0;
  std::string model;
  bool include_usage = false;  // streams: usage null in every event, then one event with usage only
  std::optional<ToolCallParsing> tool_calls = {};  // a chat whose answer is parsed for tool calls
  int top_logprobs = -1;  // CompletionRequest::top_logprobs: each choice carries its logprobs when >= 0
  std::optional<std::string> echo = {};  // with echo: the prompt's text, put before each choice's
};
// prompt_tokens_details.cached_tokens: the prompt tokens found in cached blocks (prefix caching).
nlohmann::ordered_json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);
nlohmann::ordered_json completion_json(const CompletionHeader& header, const std::string& text,
                                       const std::vector<int32_t>& ids, const char* finish_reason,
                                       int64_t prompt_tokens, int64_t cached_tokens);
// A chat stream's first event: the assistant's role, no text yet (as OpenAI's API sends it).
nlohmann::ordered_json chat_role_chunk_json(const CompletionHeader& header);
// One server-sent event's JSON: a token (finish_reason null), or the last one (with usage).
nlohmann::ordered_json stream_chunk_json(const CompletionHeader& header, const std::string& text,
                                 const std::vector<int32_t>& ids, const char* finish_reason);
// Text for the wire: invalid UTF-8 in generated text becomes U+FFFD instead of an exception.
std::string dump_json(const nlohmann::ordered_json& value);

// Per-reason counts of finished requests, kept by the server (the scheduler counts only the total
// and the cancelled).
struct FinishCounts {
  uint64_t stop = 0, length = 0, cancelled = 0;
};
// The Prometheus text of /metrics.
std::string prometheus_metrics(const SchedulerMetrics& metrics, const FinishCounts& finished, int64_t slots);

}  // namespace minfer::serve
