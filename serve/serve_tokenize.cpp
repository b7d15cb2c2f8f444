#include "serve/serve_tokenize.h"

#include <cstdint>
#include <vector>

#include "tokenizers/utf8.h"

namespace minfer::serve {

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

constexpr size_t kMaxFieldNameBytes = 64;  // an unknown field's name, echoed in the error

[[noreturn]] void refuse(const std::string& param, const std::string& message) {
  throw ApiError{400, message, param, ""};
}

const TextTokenizer& require_tokenizer(const TextTokenizer* tokenizer) {
  if (tokenizer == nullptr)
    throw ApiError{400, "this model carries no tokenizer (start minfer serve with -z TOKENIZER)", "", "no_tokenizer"};
  return *tokenizer;
}

// A boolean field; null leaves the default.
void read_flag(const std::string& name, const json& v, bool* flag) {
  if (v.is_null()) return;
  if (!v.is_boolean()) refuse(name, name + " must be a boolean");
  *flag = v.get<bool>();
}

[[noreturn]] void refuse_unknown_field(const std::string& key, const char* fields) {
  const std::string name = one_line(key, kMaxFieldNameBytes);
  refuse(name, "unknown field '" + name + "' (the fields: " + fields + ")");
}

// A piece as llama-server writes it: its text, or its bytes when they are not valid UTF-8.
ordered_json piece_json(const std::string& bytes) {
  if (utf8::is_valid(bytes)) return bytes;
  ordered_json list = ordered_json::array();
  for (char c : bytes) list.push_back(static_cast<unsigned char>(c));
  return list;
}

}  // namespace

std::string answer_tokenize(const std::string& body, const TextTokenizer* tokenizer, const ApiLimits& limits) {
  const TextTokenizer& t = require_tokenizer(tokenizer);
  const json j = parse_request_body(body);
  const std::string* content = nullptr;
  bool add_special = false, parse_special = true, with_pieces = false;
  for (const auto& [key, v] : j.items()) {
    if (key == "content") {
      if (!v.is_string()) refuse("content", "content must be a string");
      content = &v.get_ref<const std::string&>();
    } else if (key == "add_special") {
      read_flag(key, v, &add_special);
    } else if (key == "parse_special") {
      read_flag(key, v, &parse_special);
    } else if (key == "with_pieces") {
      read_flag(key, v, &with_pieces);
    } else {
      refuse_unknown_field(key, "content, add_special, parse_special, with_pieces");
    }
  }
  if (content == nullptr) refuse("content", "content is required");
  const auto max_ids = static_cast<size_t>(limits.max_prompt_tokens);
  std::vector<int32_t> ids;
  try {
    ids = parse_special ? t.encode(*content, add_special, max_ids) : t.encode_plain(*content, add_special, max_ids);
  } catch (const TooManyTokens& e) {
    throw prompt_over_limit(e, "content", limits);
  }
  ordered_json tokens = ordered_json::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (with_pieces)
      tokens.push_back({{"id", ids[i]}, {"piece", piece_json(t.token_bytes(i ? ids[i - 1] : -1, ids[i]))}});
    else
      tokens.push_back(ids[i]);
  }
  return dump_json(ordered_json{{"tokens", std::move(tokens)}});
}

std::string answer_detokenize(const std::string& body, const TextTokenizer* tokenizer, const ApiLimits& limits) {
  const TextTokenizer& t = require_tokenizer(tokenizer);
  const json j = parse_request_body(body);
  const json* tokens = nullptr;
  for (const auto& [key, v] : j.items()) {
    if (key != "tokens") refuse_unknown_field(key, "tokens");
    tokens = &v;
  }
  if (tokens == nullptr) refuse("tokens", "tokens is required");
  if (!tokens->is_array()) refuse("tokens", "tokens must be an array of token ids");
  const int64_t max_ids = limits.max_prompt_tokens + limits.max_tokens_limit;
  if (static_cast<int64_t>(tokens->size()) > max_ids)
    refuse("tokens", "tokens has " + std::to_string(tokens->size()) + " ids; this server decodes at most " +
                         std::to_string(max_ids) + " (--max-prompt-tokens + --max-tokens-limit)");
  std::vector<int32_t> ids;
  ids.reserve(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& id = (*tokens)[i];
    const std::string name = "tokens[" + std::to_string(i) + "]";
    if (!id.is_number_integer()) refuse("tokens", name + " must be an integer token id");
    if (id.is_number_unsigned() ? id.get<uint64_t>() >= static_cast<uint64_t>(t.vocab_size())
                                : id.get<int64_t>() < 0 || id.get<int64_t>() >= t.vocab_size())
      refuse("tokens", name + " = " + id.dump() + " is outside the vocabulary [0, " + std::to_string(t.vocab_size()) +
                           ")");
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return dump_json(ordered_json{{"content", t.decode(ids)}});
}

}  // namespace minfer::serve
