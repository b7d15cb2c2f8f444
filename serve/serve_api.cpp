#include "serve/serve_api.h"

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string_view>

#include "core/splitmix.h"

namespace minfer::serve {

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

constexpr size_t kMaxJsonDepth = 64;    // arrays and objects inside each other, at most
constexpr size_t kMaxModelBytes = 256;  // the model's name a request gives, echoed in every answer
constexpr size_t kMaxStopStrings = 4;
constexpr size_t kMaxStopBytes = 1024;  // per stop string: the engine's thread searches for each per token
constexpr size_t kMaxUserBytes = 256;   // `user`, which changes nothing, is still held to a string of a sane size
constexpr size_t kMaxFieldNameBytes = 64;  // an unknown field's name, echoed in the error
// What error_body echoes at most, whatever a refusal holds: a client's text inside a message is
// cut shorter where it is put in (one_line), and this bounds whatever a caller forgot to cut.
constexpr size_t kMaxErrorMessageBytes = 1024;
constexpr size_t kMaxErrorParamBytes = 128;

[[noreturn]] void refuse(const std::string& param, const std::string& message) {
  throw ApiError{400, message, param, ""};
}

std::string type_of(const json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

// The field's name is the client's: the error echoes at most kMaxFieldNameBytes of it.
[[noreturn]] void refuse_unknown_field(const std::string& key) {
  const std::string name = one_line(key, kMaxFieldNameBytes);
  refuse(name, "unknown field '" + name + "'");
}

[[noreturn]] void wrong_type(const std::string& name, const char* wanted, const json& v) {
  refuse(name, name + " must be " + wanted + ", not " + type_of(v));
}

// An integer field as int64 (an unsigned JSON integer past INT64_MAX saturates, to be refused by
// the caller's range check).
int64_t integer(const std::string& name, const json& v) {
  if (!v.is_number_integer()) wrong_type(name, "an integer", v);
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    return std::numeric_limits<int64_t>::max();
  return v.get<int64_t>();
}

double number(const std::string& name, const json& v) {
  if (!v.is_number()) wrong_type(name, "a number", v);
  return v.get<double>();
}

// The shortest text that reads back as `v` (1.0000001 stays 1.0000001).
std::string format_number(double v) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof(text), v).ptr;
  return std::string(text, end);
}

// A number field as the float the sampler takes: in [lo, hi] (above lo when `above_lo`; `range`
// says which, for the message), judged as the JSON number and again as the float it rounds to, so
// that 1e-300 for (0, 1] is refused here rather than passed on as 0.
float float_field(const std::string& name, const json& v, double lo, double hi, bool above_lo, const char* range) {
  auto inside = [&](double x) { return (above_lo ? x > lo : x >= lo) && x <= hi; };
  const double d = number(name, v);
  if (!inside(d)) refuse(name, name + " = " + format_number(d) + " is outside " + range);
  const float f = static_cast<float>(d);  // in float's range: lo and hi are
  if (!inside(f))
    refuse(name, name + " = " + format_number(d) + " is " + format_number(f) + " as a 32-bit float, outside " +
                     range);
  return f;
}

void parse_prompt(const json& v, int64_t vocab_size, bool has_tokenizer, CompletionRequest& r) {
  if (v.is_string()) {
    if (!has_tokenizer)
      refuse("prompt", "this model carries no tokenizer: give the prompt as an array of token ids "
                       "(or start minfer serve with -z TOKENIZER)");
    r.text = v.get<std::string>();
    return;
  }
  if (!v.is_array()) wrong_type("prompt", "a string or an array of token ids", v);
  if (v.empty()) refuse("prompt", "prompt is an empty array: it has no tokens");
  if (v[0].is_string() || v[0].is_array())
    refuse("prompt", "prompt: a list of prompts is not supported; send one string or one array of token ids");
  r.prompt_ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string name = "prompt[" + std::to_string(i) + "]";
    if (!v[i].is_number_integer()) wrong_type(name, "a token id (an integer)", v[i]);
    const int64_t id = integer(name, v[i]);
    if (id < 0 || id >= vocab_size)
      refuse("prompt", name + " = " + std::to_string(id) + " is outside the vocabulary [0, " +
                           std::to_string(vocab_size) + ")");
    r.prompt_ids.push_back(static_cast<int32_t>(id));
  }
}

void parse_stop(const json& v, bool has_tokenizer, CompletionRequest& r) {
  if (v.is_null()) return;
  if (v.is_string()) {
    r.stop.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > kMaxStopStrings)
      refuse("stop", "stop has " + std::to_string(v.size()) + " strings; at most " + std::to_string(kMaxStopStrings));
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) wrong_type("stop[" + std::to_string(i) + "]", "a string", v[i]);
      r.stop.push_back(v[i].get<std::string>());
    }
  } else {
    wrong_type("stop", "a string or an array of strings", v);
  }
  for (const auto& s : r.stop) {
    if (s.empty()) refuse("stop", "stop strings must not be empty");
    if (s.size() > kMaxStopBytes)
      refuse("stop", "a stop string of " + std::to_string(s.size()) + " bytes is over the limit of " +
                         std::to_string(kMaxStopBytes));
  }
  if (!r.stop.empty() && !has_tokenizer)
    refuse("stop", "stop strings need the text of the tokens, and this model carries no tokenizer");
}

// Fields of OpenAI's API that minfer does not implement: accepted only at the value that asks for
// nothing, so that a client never gets an answer to a question it did not ask.
void check_unimplemented(const std::string& key, const json& v) {
  auto only = [&](bool ok, const char* what) {
    if (!ok) refuse(key, key + " is not supported (only " + what + ")");
  };
  if (key == "best_of") only(v.is_null() || (v.is_number_integer() && v.get<int64_t>() == 1), "1");
  else if (key == "suffix") only(v.is_null(), "null");
}

constexpr double kMaxLogitBias = 100.0;  // a bias's magnitude at most, as OpenAI's API

// logit_bias: an object of at most SamplingOptions::kMaxLogitBias entries, token id (a decimal
// string) -> bias in [-100, 100]. The ids are checked against the vocabulary by check_logit_bias.
std::vector<LogitBias> parse_logit_bias(const json& v) {
  if (v.is_null()) return {};
  if (!v.is_object()) wrong_type("logit_bias", "an object of token ids and biases", v);
  if (v.size() > SamplingOptions::kMaxLogitBias)
    refuse("logit_bias", "logit_bias has " + std::to_string(v.size()) + " entries; at most " +
                             std::to_string(SamplingOptions::kMaxLogitBias));
  std::vector<LogitBias> biases;
  for (const auto& [key, bias] : v.items()) {
    int32_t id = -1;
    const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (key.empty() || error != std::errc() || end != key.data() + key.size() || id < 0)
      refuse("logit_bias", "logit_bias: '" + one_line(key, kMaxFieldNameBytes) + "' is not a token id");
    const std::string name = "logit_bias[\"" + key + "\"]";
    biases.push_back({id, float_field(name, bias, -kMaxLogitBias, kMaxLogitBias, false, "[-100, 100]")});
  }
  return biases;
}

constexpr int64_t kMaxCompletionLogprobs = 5;  // /v1/completions' logprobs at most, as OpenAI's legacy API

// /v1/completions' logprobs: null, or how many of the most likely tokens each token's entry lists.
void parse_completion_logprobs(const json& v, bool has_tokenizer, CompletionRequest& r) {
  if (v.is_null()) return;
  const int64_t n = integer("logprobs", v);
  if (n < 0 || n > kMaxCompletionLogprobs)
    refuse("logprobs", "logprobs = " + std::to_string(n) + ": 0 to " + std::to_string(kMaxCompletionLogprobs));
  if (!has_tokenizer) refuse("logprobs", "logprobs need the text of the tokens, and this model carries no tokenizer");
  r.top_logprobs = static_cast<int>(n);
}

// echo: the prompt's text before the completion's, and with logprobs the prompt's tokens first
// (OpenAI's legacy API). max_tokens 0 is for echo only (lm-eval's loglikelihood).
void parse_echo(const json& v, bool has_tokenizer, CompletionRequest& r) {
  if (v.is_null()) return;
  if (!v.is_boolean()) wrong_type("echo", "a boolean", v);
  r.echo = v.get<bool>();
  if (r.echo && !has_tokenizer)
    refuse("echo", "echo needs the text of the tokens, and this model carries no tokenizer");
}

void check_echo(const json& body, const CompletionRequest& r) {
  const json max_tokens = body.value("max_tokens", json());
  if (max_tokens.is_number_integer() && max_tokens.get<int64_t>() == 0 && !r.echo)
    refuse("max_tokens", "max_tokens = 0: at least 1 (0 only with echo)");
}

// A chat's logprobs (a boolean) and top_logprobs (0 to 20, with logprobs true only), as OpenAI's API.
void parse_chat_logprobs(const json& logprobs, const json& top, CompletionRequest& r) {
  if (!logprobs.is_null() && !logprobs.is_boolean()) wrong_type("logprobs", "a boolean", logprobs);
  const bool wanted = logprobs.is_boolean() && logprobs.get<bool>();
  if (top.is_null()) {
    r.top_logprobs = wanted ? 0 : -1;
    return;
  }
  const int64_t n = integer("top_logprobs", top);
  if (n < 0 || n > RowLogprobs::kMaxTopLogprobs)
    refuse("top_logprobs", "top_logprobs = " + std::to_string(n) + ": 0 to " +
                               std::to_string(RowLogprobs::kMaxTopLogprobs));
  if (!wanted) refuse("top_logprobs", "top_logprobs needs \"logprobs\": true");
  r.top_logprobs = static_cast<int>(n);
}

// The sampler's fields past temperature and top_p (engine/sampler.h); false for any other field.
bool parse_sampling_field(const std::string& key, const json& v, SamplingOptions& o) {
  if (v.is_null() && (key == "top_k" || key == "min_p" || key == "presence_penalty" || key == "frequency_penalty" ||
                      key == "repetition_penalty" || key == "logit_bias"))
    return true;
  if (key == "top_k") {
    const int64_t k = integer(key, v);  // -1 (vLLM's) and 0 (llama.cpp's): every token
    if (k < -1) refuse(key, "top_k = " + std::to_string(k) + ": at least -1 (-1 and 0 keep every token)");
    o.top_k = std::max<int64_t>(k, 0);
  } else if (key == "min_p") {
    o.min_p = float_field(key, v, 0.0, 1.0, false, "[0, 1]");
  } else if (key == "presence_penalty") {
    o.presence_penalty = float_field(key, v, -2.0, 2.0, false, "[-2, 2]");
  } else if (key == "frequency_penalty") {
    o.frequency_penalty = float_field(key, v, -2.0, 2.0, false, "[-2, 2]");
  } else if (key == "repetition_penalty") {
    o.repetition_penalty = float_field(key, v, 0.0, 1e6, true, "(0, 1e6]");
  } else if (key == "logit_bias") {
    o.logit_bias = parse_logit_bias(v);
  } else {
    return false;
  }
  return true;
}

}  // namespace

std::string one_line(const std::string& text, size_t max_bytes) {
  std::string out;
  for (char c : text) {
    if (out.size() >= max_bytes) {
      out += "...";
      break;
    }
    out += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? ' ' : c;
  }
  return out;
}

const char* api_error_type(int status) {
  if (status == 429) return "rate_limit_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

std::string error_body(const ApiError& error) {
  ordered_json e = {{"message", one_line(error.message, kMaxErrorMessageBytes)},
            {"type", api_error_type(error.status)},
            {"param", error.param.empty() ? ordered_json(nullptr)
                                          : ordered_json(one_line(error.param, kMaxErrorParamBytes))},
            {"code", error.code.empty() ? ordered_json(nullptr) : ordered_json(error.code)}};
  return dump_json(ordered_json{{"error", e}});
}

void check_logit_bias(const CompletionRequest& request, int64_t vocab_size) {
  for (const LogitBias& b : request.sampling.logit_bias)
    if (b.token >= vocab_size)
      refuse("logit_bias", "logit_bias: token " + std::to_string(b.token) + " is outside the vocabulary [0, " +
                               std::to_string(vocab_size) + ")");
}

uint64_t choice_seed(uint64_t seed, int64_t index) {
  const uint64_t state = seed + static_cast<uint64_t>(index);
  return state != 0 ? state : kSeedZeroState;
}

uint64_t sampler_seed(const json& seed) {
  const uint64_t state = seed.is_number_unsigned() ? seed.get<uint64_t>() : static_cast<uint64_t>(seed.get<int64_t>());
  return state != 0 ? state : kSeedZeroState;
}

namespace {
// stream_options: null, or an object whose only field is include_usage (a boolean).
void parse_stream_options(const json& v, CompletionRequest& r) {
  if (v.is_null()) return;
  if (!v.is_object())
    throw ApiError{400, "stream_options must be an object, not " + type_of(v), "stream_options", ""};
  for (const auto& [key, value] : v.items()) {
    if (key != "include_usage")
      throw ApiError{400,
                     "stream_options: unknown field '" + one_line(key, kMaxFieldNameBytes) + "' (only include_usage)",
                     "stream_options", ""};
    if (!value.is_null() && !value.is_boolean())
      throw ApiError{400, "stream_options.include_usage must be a boolean, not " + type_of(value),
                     "stream_options", ""};
    r.include_usage = value.is_boolean() && value.get<bool>();
  }
}
}  // namespace

namespace {

// How deep arrays and objects nest in `text`, read as JSON (brackets inside strings do not count).
// note: nlohmann's parser is iterative, but copying, comparing or printing a value recurses once per
// level; a body nested 100,000 deep would overflow the stack. So nesting is capped before parsing.
size_t json_depth(const std::string& text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

json parse_body(const std::string& body) {
  if (json_depth(body) > kMaxJsonDepth)
    refuse("", "the JSON body nests arrays and objects more than " + std::to_string(kMaxJsonDepth) + " deep");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 2: ...", or
    // out_of_range.406 for a number past double's range.
    std::string what = e.what();
    const size_t at = what.find("] ");
    refuse("", "malformed JSON: " + one_line(at == std::string::npos ? what : what.substr(at + 2)));
  }
  if (!j.is_object()) refuse("", "the body must be a JSON object, not " + type_of(j));
  return j;
}

int64_t parse_max_tokens(const std::string& key, const json& v, const ApiLimits& limits) {
  const int64_t n = integer(key, v);
  if (n < 1) refuse(key, key + " = " + std::to_string(n) + ": at least 1");
  if (n > limits.max_tokens_limit)
    refuse(key, key + " = " + std::to_string(n) + " is over this server's limit of " +
                    std::to_string(limits.max_tokens_limit) + " (--max-tokens-limit)");
  return n;
}

// What the answer must be, from response_format's json_schema object: {name, description, schema,
// strict}; the schema an object, as its JSON text.
OutputConstraint parse_json_schema_format(const json& v) {
  const std::string name = "response_format.json_schema";
  if (!v.is_object()) wrong_type(name, "an object", v);
  OutputConstraint want{OutputConstraint::Kind::json_schema, "", false, "response_format"};
  bool has_schema = false;
  for (const auto& [key, field] : v.items()) {
    if (key == "schema") {
      if (!field.is_object()) wrong_type(name + ".schema", "an object", field);
      want.text = field.dump();
      has_schema = true;
    } else if (key == "strict") {
      if (!field.is_null() && !field.is_boolean()) wrong_type(name + ".strict", "a boolean", field);
      want.strict = field.is_boolean() && field.get<bool>();
    } else if (key == "name" || key == "description") {
      if (!field.is_string()) wrong_type(name + "." + key, "a string", field);
    } else {
      refuse("response_format", name + ": unknown field '" + one_line(key, kMaxFieldNameBytes) +
                                    "' (only name, description, schema and strict)");
    }
  }
  if (!has_schema) refuse("response_format", name + ".schema is required");
  check_grammar_size("response_format", want.text.size());
  return want;
}

// response_format ({"type": "text" | "json_object" | "json_schema"}), grammar and regex: at most
// one of them constrains the answer.
void parse_output_field(const std::string& key, const json& v, CompletionRequest& r) {
  if (v.is_null()) return;
  std::optional<OutputConstraint> want;
  if (key == "response_format") {
    if (!v.is_object()) wrong_type(key, "an object", v);
    const auto type = v.find("type");
    if (type == v.end() || !type->is_string()) refuse(key, "response_format.type must be a string");
    const std::string& t = type->get_ref<const std::string&>();
    for (const auto& [field, unused] : v.items())
      if (field != "type" && !(t == "json_schema" && field == "json_schema"))
        refuse(key, "response_format: unknown field '" + one_line(field, kMaxFieldNameBytes) + "' for type '" +
                        one_line(t, 32) + "'");
    if (t == "json_object") want = OutputConstraint{OutputConstraint::Kind::json_object, "", false, key};
    else if (t == "json_schema") want = parse_json_schema_format(v.contains("json_schema") ? v["json_schema"] : json());
    else if (t != "text")
      refuse(key, "response_format.type '" + one_line(t, 32) + "' is not supported (text, json_object, json_schema)");
  } else {  // grammar (EBNF), regex
    if (!v.is_string()) wrong_type(key, "a string", v);
    check_grammar_size(key, v.get_ref<const std::string&>().size());
    want = OutputConstraint{key == "grammar" ? OutputConstraint::Kind::grammar : OutputConstraint::Kind::regex,
                            v.get<std::string>(), false, key};
  }
  if (!want) return;
  if (r.output) refuse(key, key + " and " + r.output->param + " both constrain the answer; give one");
  r.output = std::move(want);
}

// A json_schema's text with its keys in the order the client wrote them (json sorts an object's
// keys; XGrammar writes an object's properties in its schema's order, as OpenAI's API does). The
// body parsed keeping the order must give the same schema (a body with repeated keys may not).
void keep_schema_order(const std::string& body, CompletionRequest& r) {
  if (!r.output || r.output->kind != OutputConstraint::Kind::json_schema) return;
  const auto ordered = nlohmann::ordered_json::parse(body, nullptr, false);
  const auto format = ordered.find("response_format");
  if (format == ordered.end() || !format->contains("json_schema") || !(*format)["json_schema"].contains("schema"))
    return;
  std::string text = (*format)["json_schema"]["schema"].dump();
  if (json::parse(text) == json::parse(r.output->text)) r.output->text = std::move(text);
}

// The fields both routes share; false for a field that is not one of them.
bool parse_shared_field(const std::string& key, const json& v, bool has_tokenizer, const ApiLimits& limits,
                        CompletionRequest& r) {
  if (key == "model") {
    if (!v.is_null() && !v.is_string()) wrong_type("model", "a string", v);
    if (v.is_string() && v.get_ref<const std::string&>().size() > kMaxModelBytes)
      refuse("model", "model is over " + std::to_string(kMaxModelBytes) + " bytes");
    if (v.is_string()) r.model = v.get<std::string>();
  } else if (key == "max_tokens") {
    if (!v.is_null()) r.max_tokens = parse_max_tokens(key, v, limits);
    r.max_tokens_given = r.max_tokens_given || !v.is_null();
  } else if (key == "temperature") {
    // (A temperature that rounds to 0 is greedy: the limit that sampling tends to.)
    if (!v.is_null()) r.temperature = float_field(key, v, 0.0, 1e6, false, "[0, 1e6]");
  } else if (key == "top_p") {
    if (!v.is_null()) r.top_p = float_field(key, v, 0.0, 1.0, true, "(0, 1]");
  } else if (key == "seed") {
    if (v.is_null()) return true;
    if (!v.is_number_integer()) wrong_type("seed", "a 64-bit integer", v);
    r.seed = sampler_seed(v);
  } else if (key == "stop") {
    parse_stop(v, has_tokenizer, r);
  } else if (key == "stream") {
    if (!v.is_null() && !v.is_boolean()) wrong_type("stream", "a boolean", v);
    r.stream = v.is_boolean() && v.get<bool>();
  } else if (key == "ignore_eos") {
    if (!v.is_null() && !v.is_boolean()) wrong_type("ignore_eos", "a boolean", v);
    r.ignore_eos = v.is_boolean() && v.get<bool>();
  } else if (parse_sampling_field(key, v, r.sampling)) {
    return true;
  } else if (key == "response_format" || key == "grammar" || key == "regex") {
    parse_output_field(key, v, r);
  } else if (key == "n") {
    if (v.is_null()) return true;
    r.n = integer(key, v);
    if (r.n < 1 || r.n > kMaxChoices)
      refuse(key, "n = " + std::to_string(r.n) + ": 1 to " + std::to_string(kMaxChoices) + " choices");
  } else if (key == "stream_options") {
    parse_stream_options(v, r);
  } else if (key == "cache_salt") {
    if (v.is_null()) return true;
    if (!v.is_string()) wrong_type("cache_salt", "a string", v);
    const size_t n = v.get_ref<const std::string&>().size();
    if (n == 0 || n > kMaxCacheSaltBytes)
      refuse("cache_salt", "cache_salt has " + std::to_string(n) + " bytes; it must have 1 to " +
                               std::to_string(kMaxCacheSaltBytes));
    r.cache_salt = v.get<std::string>();
  } else if (key == "user") {  // `user` identifies the caller to OpenAI and changes nothing
    if (!v.is_null() && !v.is_string()) wrong_type("user", "a string", v);
    if (v.is_string() && v.get_ref<const std::string&>().size() > kMaxUserBytes)
      refuse("user", "user is over " + std::to_string(kMaxUserBytes) + " bytes");
  } else {
    return false;
  }
  return true;
}

void check_stream_usage(const CompletionRequest& r) {
  if (r.include_usage && !r.stream)
    refuse("stream_options", "stream_options.include_usage is only for streams (\"stream\": true)");
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts, joined.
std::string message_content(const json& v, const std::string& name) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) wrong_type(name, "a string or an array of text parts", v);
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string part = name + "[" + std::to_string(i) + "]";
    if (!v[i].is_object()) wrong_type(part, "an object", v[i]);
    const auto type = v[i].find("type");
    if (type == v[i].end() || !type->is_string()) refuse("messages", part + ".type must be a string");
    if (*type != "text")
      refuse("messages", part + ": content of type '" + one_line(type->get<std::string>(), 32) +
                             "' is not supported (only text)");
    const auto t = v[i].find("text");
    if (t == v[i].end() || !t->is_string()) refuse("messages", part + ".text must be a string");
    for (const auto& field : v[i].items())
      if (field.key() != "type" && field.key() != "text")
        refuse("messages",
               part + ": unknown field '" + one_line(field.key(), kMaxFieldNameBytes) + "' (only type and text)");
    text += t->get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> parse_messages(const json& v) {
  if (!v.is_array()) wrong_type("messages", "an array of messages", v);
  if (v.empty()) refuse("messages", "messages is empty: a chat needs at least one message");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string name = "messages[" + std::to_string(i) + "]";
    if (!v[i].is_object()) wrong_type(name, "an object", v[i]);
    ChatMessage m;
    bool has_content = false;
    for (const auto& [key, field] : v[i].items()) {
      if (key == "role") {
        if (!field.is_string()) wrong_type(name + ".role", "a string", field);
        m.role = field.get<std::string>();
      } else if (key == "content") {
        if (field.is_null()) continue;
        m.content = message_content(field, name + ".content");
        has_content = true;
      } else if (key == "name") {
        if (!field.is_null()) refuse("messages", name + ".name is not supported (the chat templates have no place for it)");
      } else if (key == "tool_calls") {  // serve/tool_calls.h
        m.tool_calls = parse_history_tool_calls(field, name + ".tool_calls");
      } else if (key == "tool_call_id") {
        if (!field.is_null()) m.tool_call_id = parse_tool_call_id(field, name + ".tool_call_id");
      } else if (key == "function_call") {
        if (!field.is_null()) refuse("messages", name + ".function_call is not supported (use tool_calls)");
      } else if (key == "refusal" || key == "audio" || key == "annotations") {
        // An answer's message sent back as it came (the SDKs' model_dump) carries these empty.
        if (!field.is_null() && !(field.is_array() && field.empty()))
          refuse("messages", name + "." + key + " is not supported (only null)");
      } else {
        refuse("messages", name + ": unknown field '" + one_line(key, kMaxFieldNameBytes) + "'");
      }
    }
    if (m.role == "developer") m.role = "system";  // OpenAI's newer name for the system message
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
      refuse("messages", name + ".role '" + one_line(m.role, 32) + "' is not supported (system, user, assistant, tool)");
    if (!m.tool_calls.empty() && m.role != "assistant") refuse("messages", name + ": only an assistant has tool_calls");
    if ((m.role == "tool") != !m.tool_call_id.empty())
      refuse("messages", name + (m.role == "tool" ? ": a tool message needs its tool_call_id"
                                                  : ": only a tool message has a tool_call_id"));
    if (!has_content && m.tool_calls.empty()) refuse("messages", name + " has no content");
    messages.push_back(std::move(m));
  }
  return messages;
}

// Chat fields of OpenAI's API that ask for what minfer does not do: accepted only at the value
// that asks for nothing.
void check_chat_unimplemented(const std::string& key, const json& v) {
  auto only = [&](bool ok, const char* what) {
    if (!ok) refuse(key, key + " is not supported (only " + what + ")");
  };
  const bool empty = v.is_null() || (v.is_array() && v.empty());
  if (key == "functions") only(empty, "none; use tools");
  else if (key == "function_call") only(v.is_null() || v == "none" || v == "auto", "\"none\"; use tool_choice");
  else if (key == "store") only(v.is_null() || v == false, "false");
  else if (key == "modalities") only(v.is_null() || v == json::array({"text"}), "[\"text\"]");
  else only(false, "its absence");  // audio, prediction, reasoning_effort, web_search_options, ...
}

}  // namespace

nlohmann::json parse_request_body(const std::string& body) { return parse_body(body); }

CompletionRequest parse_completion_request(const std::string& body, int64_t vocab_size, bool has_tokenizer,
                                           const ApiLimits& limits) {
  const json j = parse_body(body);
  CompletionRequest r;
  bool has_prompt = false;
  for (const auto& [key, v] : j.items()) {
    if (key == "max_tokens" && v.is_number_integer() && v.get<int64_t>() == 0) {  // with echo only: check_echo
      r.max_tokens = 0;
      r.max_tokens_given = true;
      continue;
    }
    if (parse_shared_field(key, v, has_tokenizer, limits, r)) continue;
    if (key == "prompt") {
      parse_prompt(v, vocab_size, has_tokenizer, r);
      has_prompt = true;
    } else if (key == "logprobs") {
      parse_completion_logprobs(v, has_tokenizer, r);
    } else if (key == "echo") {
      parse_echo(v, has_tokenizer, r);
    } else if (key == "best_of" || key == "suffix") {
      check_unimplemented(key, v);
    } else {
      refuse_unknown_field(key);
    }
  }
  if (!has_prompt) refuse("prompt", "prompt is required");
  check_echo(j, r);
  keep_schema_order(body, r);
  check_stream_usage(r);
  return r;
}

CompletionRequest parse_chat_request(const std::string& body, const ApiLimits& limits) {
  const json j = parse_body(body);
  CompletionRequest r;
  r.chat = true;
  bool has_messages = false;
  std::optional<int64_t> max_completion_tokens;
  for (const auto& [key, v] : j.items()) {
    if (parse_shared_field(key, v, true, limits, r)) continue;
    if (key == "messages") {
      r.messages = parse_messages(v);
      has_messages = true;
    } else if (key == "max_completion_tokens") {
      if (!v.is_null()) max_completion_tokens = parse_max_tokens(key, v, limits);
    } else if (key == "logprobs" || key == "top_logprobs") {
      continue;  // read together below
    } else if (key == "metadata" || key == "service_tier") {
      continue;  // labels for OpenAI's dashboard and billing: they change no answer
    } else if (key == "tools" || key == "tool_choice" || key == "parallel_tool_calls") {
      continue;  // below, with the keys in their order
    } else if (key == "functions" || key == "function_call" ||
               key == "store" ||
               key == "modalities" || key == "audio" || key == "prediction" ||
               key == "reasoning_effort" || key == "web_search_options") {
      check_chat_unimplemented(key, v);
    } else {
      refuse_unknown_field(key);
    }
  }
  if (!has_messages) refuse("messages", "messages is required");
  parse_chat_logprobs(j.value("logprobs", json()), j.value("top_logprobs", json()), r);
  if (j.contains("tools") || j.contains("tool_choice") || j.contains("parallel_tool_calls")) {
    const nlohmann::ordered_json in_order = nlohmann::ordered_json::parse(body);  // a tool is rendered as sent
    auto field = [&](const char* key) { return in_order.contains(key) ? in_order[key] : nlohmann::ordered_json(); };
    r.tools = parse_tool_request(field("tools"), field("tool_choice"), field("parallel_tool_calls"));
  }
  if (max_completion_tokens) {
    if (j.contains("max_tokens") && !j["max_tokens"].is_null() && r.max_tokens != *max_completion_tokens)
      refuse("max_completion_tokens", "max_tokens and max_completion_tokens disagree; give one");
    r.max_tokens = *max_completion_tokens;
    r.max_tokens_given = true;
  }
  keep_schema_order(body, r);
  check_stream_usage(r);
  return r;
}

int64_t chat_max_tokens(int64_t prompt_tokens, int64_t n_ctx, const ApiLimits& limits) {
  // At least 1: a prompt that fills the context is then refused by the scheduler, with the numbers.
  return std::max<int64_t>(1, std::min(limits.max_tokens_limit, n_ctx - prompt_tokens));
}

void check_prompt_length(int64_t prompt_tokens, const ApiLimits& limits) {
  if (prompt_tokens > limits.max_prompt_tokens)
    refuse("prompt", "the prompt of " + std::to_string(prompt_tokens) + " tokens is over this server's limit of " +
                         std::to_string(limits.max_prompt_tokens) + " tokens (--max-prompt-tokens)");
}

ApiError prompt_over_limit(const TooManyTokens& e, const std::string& param, const ApiLimits& limits) {
  const std::string limit =
      "this server's limit of " + std::to_string(limits.max_prompt_tokens) + " tokens (--max-prompt-tokens)";
  if (e.bytes_per_token == 0) return {400, "the prompt is over " + limit, param, ""};
  return {400,
          "the prompt of " + std::to_string(e.text_bytes) + " bytes is over " + limit +
              ": no token of this model stands for more than " + std::to_string(e.bytes_per_token) + " bytes",
          param, ""};
}

namespace {

// `bytes` hashed 8 at a time into a state that starts at `key`, their count last.
uint64_t keyed_hash(uint64_t key, std::string_view bytes) {
  uint64_t h = splitmix64_finalize(key);
  for (size_t i = 0; i < bytes.size(); i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, bytes.data() + i, std::min<size_t>(8, bytes.size() - i));
    h = splitmix64_finalize(h ^ word);
  }
  return splitmix64_finalize(h ^ uint64_t(bytes.size()));
}

}  // namespace

std::string_view bearer_token(const std::string& authorization) {
  constexpr std::string_view scheme = "bearer ";
  if (authorization.size() <= scheme.size()) return {};
  for (size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != scheme[i]) return {};
  return std::string_view(authorization).substr(scheme.size());
}

uint64_t cache_scope(uint64_t secret, const std::string& authorization, const std::optional<std::string>& salt) {
  const std::string_view key = bearer_token(authorization);
  if (key.empty() && !salt) return 0;
  uint64_t h = keyed_hash(secret, key);
  if (salt) h = keyed_hash(h ^ 0x73616c7400000000ull, *salt);  // "salt": a salted key is another scope
  return h != 0 ? h : 1;
}

uint64_t draw_cache_secret() {
  std::random_device device;
  return (uint64_t(device()) << 32) ^ uint64_t(device());
}

int64_t client_cached_tokens(int64_t cached_tokens, int64_t block_size) {
  return cached_tokens / block_size * block_size;
}

}  // namespace minfer::serve
