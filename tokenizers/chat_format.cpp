#include "tokenizers/chat_format.h"

#include <algorithm>

#include "core/error.h"

namespace minfer {

namespace {

// The text of a special token (bos_token, eos_token in a template); "" for none.
std::string token_text(const TextTokenizer& tokenizer, int32_t id) {
  if (id < 0 || id >= tokenizer.vocab_size()) return {};
  return tokenizer.decode({id});
}

ChatTemplate choose_template(const TextTokenizer& tokenizer, const std::string& name) {
  const std::vector<int32_t> eos = tokenizer.eos_ids();
  const std::string bos_text = token_text(tokenizer, tokenizer.bos_id());
  const std::string eos_text = eos.empty() ? std::string() : token_text(tokenizer, eos.front());
  if (!name.empty()) return ChatTemplate::named(name, bos_text, eos_text);
  const std::string text = tokenizer.chat_template();
  MINFER_CHECK(!text.empty(), "this model carries no chat template; choose one with --chat-template NAME (",
               [] {
                 std::string names;
                 for (const std::string& n : ChatTemplate::names()) names += (names.empty() ? "" : ", ") + n;
                 return names;
               }(),
               ")");
  return ChatTemplate::from_text(text, bos_text, eos_text);
}

// The ids of what the template writes itself, in conversations with every role (those it accepts).
std::vector<int32_t> template_ids(const TextTokenizer& tokenizer, const ChatTemplate& chat) {
  const std::vector<std::vector<ChatMessage>> samples = {
      {{"system", "s"}, {"user", "u"}, {"assistant", "a"}, {"user", "u"}},
      {{"user", "u"}, {"assistant", "a"}, {"user", "u"}},
  };
  std::vector<int32_t> ids;
  for (const auto& messages : samples) {
    try {
      for (const ChatPiece& piece : chat.render(messages, true))
        if (piece.special)
          for (int32_t id : tokenizer.encode(piece.text, false)) ids.push_back(id);
    } catch (const Error&) {  // a template that refuses system messages
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace

ChatFormat::ChatFormat(const TextTokenizer& tokenizer, const std::string& name)
    : tokenizer_(tokenizer), template_(choose_template(tokenizer, name)) {
  for (const std::string& marker : template_.end_of_turn()) {
    if (marker.empty()) continue;
    const std::vector<int32_t> ids = tokenizer_.encode(marker, false);
    MINFER_CHECK(ids.size() == 1, "chat template ", template_.name(), ": its end of turn '", marker, "' is ",
                 ids.size(), " tokens of this vocabulary, not one special token");
    if (std::find(end_of_turn_.begin(), end_of_turn_.end(), ids[0]) == end_of_turn_.end())
      end_of_turn_.push_back(ids[0]);
  }
  markers_ = template_ids(tokenizer_, template_);
  markers_.insert(markers_.end(), end_of_turn_.begin(), end_of_turn_.end());
  if (tokenizer_.bos_id() >= 0) markers_.push_back(tokenizer_.bos_id());
  for (int32_t id : tokenizer_.eos_ids()) markers_.push_back(id);
}

std::vector<int32_t> ChatFormat::encode(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                        size_t max_ids, const std::vector<std::string>& tools) const {
  std::vector<TextSpan> spans;
  for (ChatPiece& piece : template_.render(messages, add_generation_prompt, tools))
    spans.push_back({std::move(piece.text), piece.special});
  return tokenizer_.encode_spans(spans, markers_, max_ids);
}

}  // namespace minfer
