// A chat template bound to a tokenizer: a conversation becomes token ids, the rendered text encoded
// as one text (as transformers' apply_chat_template does), except that special tokens are
// recognised only in the template's own text (TextTokenizer::encode_spans): a user who types
// "<|im_end|>" in a message gets its characters, not the end of the turn.
//
// note: the rendered conversation is encoded without the tokenizer's add_special (no BOS added):
// the templates that want BOS write bos_token themselves, as transformers' apply_chat_template
// (tokenize=True) encodes them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizers/chat_template.h"
#include "tokenizers/text_tokenizer.h"

namespace minfer {

class ChatFormat {
 public:
  // The template named `name` (--chat-template: chatml, llama2, ...) or, when `name` is empty, the
  // model's own (TextTokenizer::chat_template()). Throws Error with one line when the model has
  // none or it is not one minfer recognises (naming --chat-template), or when the template's
  // end-of-turn marker is not a single token of this vocabulary.
  ChatFormat(const TextTokenizer& tokenizer, const std::string& name);

  const ChatTemplate& chat_template() const { return template_; }
  // The ids of the conversation; with add_generation_prompt, ending in the assistant's header.
  // With max_ids, a conversation of more than max_ids ids throws TooManyTokens (TextTokenizer::encode):
  // the rendered text's length is checked before it is encoded. `tools`: the JSON texts of the
  // tools offered (ChatTemplate::render).
  std::vector<int32_t> encode(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                              size_t max_ids = kNoTokenLimit, const std::vector<std::string>& tools = {}) const;
  // The tokens that end an assistant's turn (they end a generation, besides the model's EOS).
  const std::vector<int32_t>& end_of_turn_ids() const { return end_of_turn_; }

 private:
  const TextTokenizer& tokenizer_;
  ChatTemplate template_;
  std::vector<int32_t> end_of_turn_;
  // The tokens of the template's own text (its markers among them), BOS and EOS: a message may
  // not produce them as added tokens, special or not (TextTokenizer::encode_spans).
  std::vector<int32_t> markers_;
};

}  // namespace minfer
