#include "serve/logprobs_json.h"

#include <string>

#include "tokenizers/utf8.h"

namespace minfer::serve {

namespace {

using ordered_json = nlohmann::ordered_json;

ordered_json bytes_json(const std::string& piece) {
  ordered_json bytes = ordered_json::array();
  for (char c : piece) bytes.push_back(static_cast<unsigned char>(c));
  return bytes;
}

// One token of a chat's logprobs.content, with its top ones.
ordered_json chat_entry(const TokenPieces& pieces, int32_t prev, const TokenLogprob* e, size_t per_token) {
  auto one = [&](const TokenLogprob& t) {
    const std::string& piece = pieces.piece(prev, t.token);
    return ordered_json{{"token", utf8::lossy(piece)}, {"logprob", t.logprob}, {"bytes", bytes_json(piece)}};
  };
  ordered_json entry = one(e[0]);
  entry["top_logprobs"] = ordered_json::array();
  for (size_t j = 1; j < per_token; ++j) entry["top_logprobs"].push_back(one(e[j]));
  return entry;
}

}  // namespace

ordered_json logprobs_json(bool chat, const TokenPieces& pieces, int32_t prev, const int32_t* ids, size_t n,
                           const TokenLogprob* entries, size_t per_token, size_t* text_offset) {
  if (chat) {
    ordered_json content = ordered_json::array();
    for (size_t k = 0; k < n; ++k) {
      content.push_back(chat_entry(pieces, prev, entries + k * per_token, per_token));
      prev = ids[k];
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  ordered_json tokens = ordered_json::array(), token_logprobs = ordered_json::array(),
               top_logprobs = ordered_json::array(), offsets = ordered_json::array();
  for (size_t k = 0; k < n; ++k) {
    const TokenLogprob* e = entries + k * per_token;
    const std::string token = utf8::lossy(pieces.piece(prev, ids[k]));
    tokens.push_back(token);
    token_logprobs.push_back(e[0].logprob);
    ordered_json top = ordered_json::object();
    for (size_t j = 1; j < per_token; ++j) top[utf8::lossy(pieces.piece(prev, e[j].token))] = e[j].logprob;
    top_logprobs.push_back(std::move(top));
    offsets.push_back(*text_offset);
    *text_offset += token.size();
    prev = ids[k];
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(offsets)}};
}

ordered_json echo_logprobs_json(const TokenPieces& pieces, const std::vector<int32_t>& prompt,
                                const TokenLogprob* prompt_entries, const int32_t* ids, size_t n,
                                const TokenLogprob* entries, size_t per_token, size_t* text_offset) {
  const std::string first = utf8::lossy(pieces.piece(-1, prompt[0]));
  ordered_json all = {{"tokens", ordered_json::array({first})},
                      {"token_logprobs", ordered_json::array({nullptr})},
                      {"top_logprobs", ordered_json::array({nullptr})},
                      {"text_offset", ordered_json::array({0})}};
  *text_offset = first.size();
  auto append = [&all](const ordered_json& part) {
    for (auto& [key, values] : all.items())
      for (const ordered_json& v : part[key]) values.push_back(v);
  };
  append(logprobs_json(false, pieces, prompt[0], prompt.data() + 1, prompt.size() - 1, prompt_entries, per_token,
                       text_offset));
  append(logprobs_json(false, pieces, prompt.back(), ids, n, entries, per_token, text_offset));
  return all;
}

}  // namespace minfer::serve
