// The JSON of `minfer serve`'s answers (whole, and each server-sent event of a stream) and the
// Prometheus text of /metrics: what a client reads, fields in OpenAI's order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/scheduler.h"
#include "serve/tool_calls.h"

namespace minfer::serve {

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
