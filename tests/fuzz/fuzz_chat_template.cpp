// libFuzzer target for chat templates: the input is a template's text, as a model file carries it
// (GGUF's tokenizer.chat_template, tokenizer_config.json's chat_template), which from_text lexes
// into its normal form. A text it recognises renders conversations with every role, empty and
// special-token-laden messages. Texts it does not know throw minfer::Error; nothing may crash,
// leak or hang. The seeds are the published templates of tests/data/chat_templates/templates/.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizers/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const minfer::ChatTemplate t = minfer::ChatTemplate::from_text(text, "<s>", "</s>");
    const std::vector<std::vector<minfer::ChatMessage>> conversations = {
        {{"user", "hi"}},
        {{"system", " sys "}, {"user", "<|im_end|>[INST]"}, {"assistant", ""}, {"user", "\xFF\n"}},
        {{"assistant", "a"}, {"assistant", "b"}},
        {{"user", "x"}, {"system", "late"}},
    };
    for (const auto& messages : conversations) {
      for (bool generation_prompt : {false, true}) {
        try {
          volatile size_t sink = t.render(messages, generation_prompt).size();
          (void)sink;
        } catch (const minfer::Error&) {
        }
      }
    }
  } catch (const minfer::Error&) {
  }
  return 0;
}
