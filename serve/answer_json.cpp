#include "serve/answer_json.h"

#include <sstream>

namespace minfer::serve {

using ordered_json = nlohmann::ordered_json;

ordered_json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

namespace {

ordered_json finish_json(const char* finish_reason) {
  return finish_reason ? ordered_json(finish_reason) : ordered_json(nullptr);
}

// A text completion's choice carries the text and its token ids (minfer's addition, as vLLM's
// return_token_ids); a chat's carries a message, or in a stream a delta.
ordered_json choice_json(const CompletionHeader& header, const std::string& text, const std::vector<int32_t>& ids,
                         const char* finish_reason, bool whole) {
  if (!header.chat)
    return {{"index", 0}, {"text", text}, {"token_ids", ids}, {"finish_reason", finish_json(finish_reason)},
            {"logprobs", nullptr}};
  ordered_json message = whole ? ordered_json{{"role", "assistant"}, {"content", text}}
                               : (text.empty() && finish_reason ? ordered_json::object() : ordered_json{{"content", text}});
  return {{"index", 0}, {whole ? "message" : "delta", message}, {"logprobs", nullptr},
          {"finish_reason", finish_json(finish_reason)}};
}

ordered_json object_json(const CompletionHeader& header, ordered_json choice, bool whole) {
  const char* object = header.chat ? (whole ? "chat.completion" : "chat.completion.chunk") : "text_completion";
  ordered_json out = {{"id", header.id},
                      {"object", object},
                      {"created", header.created},
                      {"model", header.model},
                      {"choices", ordered_json::array({std::move(choice)})}};
  if (header.include_usage && !whole) out["usage"] = nullptr;
  return out;
}

}  // namespace

ordered_json completion_json(const CompletionHeader& header, const std::string& text,
                             const std::vector<int32_t>& ids, const char* finish_reason, int64_t prompt_tokens,
                             int64_t cached_tokens) {
  ordered_json out = object_json(header, choice_json(header, text, ids, finish_reason, true), true);
  out["usage"] = usage_json(prompt_tokens, static_cast<int64_t>(ids.size()), cached_tokens);
  return out;
}

ordered_json stream_chunk_json(const CompletionHeader& header, const std::string& text,
                               const std::vector<int32_t>& ids, const char* finish_reason) {
  return object_json(header, choice_json(header, text, ids, finish_reason, false), false);
}

ordered_json chat_role_chunk_json(const CompletionHeader& header) {
  ordered_json choice = {{"index", 0},
                         {"delta", {{"role", "assistant"}, {"content", ""}}},
                         {"logprobs", nullptr},
                         {"finish_reason", nullptr}};
  return object_json(header, std::move(choice), false);
}

std::string dump_json(const ordered_json& value) {
  return value.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

namespace {
void metric_header(std::ostringstream& out, const char* name, const char* type, const char* help) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
}

void histogram(std::ostringstream& out, const char* name, const char* help, const uint64_t* counts, double sum,
               uint64_t n) {
  metric_header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (int b = 0; b < SchedulerMetrics::kBuckets; ++b) {
    cumulative += counts[b];
    out << name << "_bucket{le=\"" << SchedulerMetrics::kBounds[b] << "\"} " << cumulative << "\n";
  }
  out << name << "_bucket{le=\"+Inf\"} " << n << "\n";
  out << name << "_sum " << sum << "\n" << name << "_count " << n << "\n";
}
}  // namespace

std::string prometheus_metrics(const SchedulerMetrics& m, const FinishCounts& finished, int64_t slots) {
  std::ostringstream out;
  out.precision(9);
  metric_header(out, "minfer_requests_total", "counter", "Completion requests the scheduler accepted.");
  out << "minfer_requests_total " << m.requests_submitted << "\n";
  metric_header(out, "minfer_requests_finished_total", "counter", "Completion requests ended, by reason.");
  out << "minfer_requests_finished_total{reason=\"stop\"} " << finished.stop << "\n"
      << "minfer_requests_finished_total{reason=\"length\"} " << finished.length << "\n"
      << "minfer_requests_finished_total{reason=\"cancelled\"} " << finished.cancelled << "\n";
  metric_header(out, "minfer_requests_refused_total", "counter",
                "Completion requests the scheduler refused (too long for the context, a full queue).");
  out << "minfer_requests_refused_total " << m.requests_refused << "\n";
  metric_header(out, "minfer_prompt_tokens_total", "counter", "Prompt tokens run through the model.");
  out << "minfer_prompt_tokens_total " << m.prompt_tokens << "\n";
  metric_header(out, "minfer_prompt_tokens_cached_total", "counter",
                "Prompt tokens served from cached blocks (prefix caching), not run through the model.");
  out << "minfer_prompt_tokens_cached_total " << m.prompt_tokens_cached << "\n";
  metric_header(out, "minfer_generation_tokens_total", "counter", "Tokens generated.");
  out << "minfer_generation_tokens_total " << m.generated_tokens << "\n";
  metric_header(out, "minfer_queue_depth", "gauge", "Requests waiting to run (for a slot or for blocks).");
  out << "minfer_queue_depth " << m.queue_depth << "\n";
  metric_header(out, "minfer_busy_slots", "gauge", "Slots holding a request: the requests running.");
  out << "minfer_busy_slots " << m.busy_slots << "\n";
  metric_header(out, "minfer_kv_blocks", "gauge", "Blocks of the KV cache (0: whole contexts, static batches).");
  out << "minfer_kv_blocks " << m.kv_blocks_total << "\n";
  metric_header(out, "minfer_kv_blocks_used", "gauge", "Blocks held by running requests.");
  out << "minfer_kv_blocks_used " << m.kv_blocks_used << "\n";
  metric_header(out, "minfer_kv_blocks_cached", "gauge",
                "Blocks no request holds, kept for their tokens until evicted (prefix caching).");
  out << "minfer_kv_blocks_cached " << m.kv_blocks_cached << "\n";
  metric_header(out, "minfer_preemptions_total", "counter",
                "Requests preempted for want of blocks, to be recomputed later.");
  out << "minfer_preemptions_total " << m.preemptions << "\n";
  metric_header(out, "minfer_masked_tokens_total", "counter",
                "Tokens sampled under a grammar (response_format, grammar, regex).");
  out << "minfer_masked_tokens_total " << m.masked_tokens << "\n";
  metric_header(out, "minfer_refused_tokens_total", "counter",
                "Tokens a grammar's matcher refused after its mask allowed them.");
  out << "minfer_refused_tokens_total " << m.refused_tokens << "\n";
  metric_header(out, "minfer_mask_seconds_total", "counter",
                "Time the engine spent filling and applying those tokens' grammar masks.");
  out << "minfer_mask_seconds_total " << m.mask_seconds << "\n";
  metric_header(out, "minfer_slots", "gauge", "Slots (sequences decoded together).");
  out << "minfer_slots " << slots << "\n";
  histogram(out, "minfer_time_to_first_token_seconds", "Time from submission to the first generated token.",
            m.ttft_counts, m.ttft_sum, m.ttft_n);
  histogram(out, "minfer_time_per_output_token_seconds", "Time per generated token after the first.", m.tpot_counts,
            m.tpot_sum, m.tpot_n);
  return out.str();
}

}  // namespace minfer::serve
