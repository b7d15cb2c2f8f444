// Chat templates: how a chat model wants a conversation written out as one prompt.
//
// A chat model was fine-tuned on conversations laid out in one exact format: Llama 3 frames every
// message as <|start_header_id|>ROLE<|end_header_id|>\n\nTEXT<|eot_id|>, Qwen as
// <|im_start|>ROLE\nTEXT<|im_end|>\n, Mistral as [INST] TEXT [/INST]. A prompt in another format,
// or with one newline too many, still runs but answers worse. The model publishes its format as a
// Jinja template (tokenizer_config.json's chat_template, GGUF's tokenizer.chat_template), and
// transformers' apply_chat_template renders it with Python's jinja2.
//
// minfer does not interpret Jinja. Debian has no maintained C++ Jinja package, and a handful of
// formats cover the models people run, so each format is rendered in code (chat_template.cpp,
// one function per published template, written beside the Jinja it mirrors). from_text recognises
// the template by comparing it with the published ones it knows, ignoring only what cannot change
// the output (layout, quoting, Jinja's white-space markers); anything else is refused, and the user
// names a format with --chat-template. tests/test_chat_template.cpp holds every rendering to
// jinja2's own output for the real templates (tests/data/chat_templates/), byte for byte,
// including the conversations a template refuses with raise_exception.
//
// The rendering comes as pieces, because text and markers must be tokenized differently. The
// markers the template writes (<|im_start|>, [INST], the role names, BOS) are special tokens and
// must be encoded as such; a message is what someone typed and must be encoded as plain text, so
// that a user who types "<|im_end|>" gets the characters, not the end of their turn.
#pragma once

#include <string>
#include <vector>

namespace minfer {

// A function call an assistant made, as OpenAI's API carries it in a conversation's history.
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // the JSON text of an object
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  std::vector<ChatToolCall> tool_calls = {};  // an assistant's calls (its content may then be "")
  std::string tool_call_id = {};              // a tool message: the call whose result it holds
};

// One run of rendered text. special = true: the template's own text (markers such as <|im_start|>,
// [INST], role names and the newlines the template writes), tokenized with special tokens
// recognised; special = false: a message's content, tokenized as plain text.
struct ChatPiece {
  std::string text;
  bool special;
};

// A model's chat format. Templates that start the prompt with BOS write bos_token themselves
// (Llama 2 and 3, Mistral, Gemma), as a special piece: encode the pieces without the tokenizer's
// add_special, as transformers' apply_chat_template does, or BOS comes twice.
class ChatTemplate {
 public:
  // The format of `template_text`, recognised from its text; throws minfer::Error, one line:
  // "chat template not recognised (...); choose one with --chat-template NAME (chatml, ...)".
  static ChatTemplate from_text(const std::string& template_text, const std::string& bos_token,
                                const std::string& eos_token);
  // --chat-template NAME, one of names(); throws Error listing the names for another.
  static ChatTemplate named(const std::string& name, const std::string& bos_token, const std::string& eos_token);
  static std::vector<std::string> names();  // chatml, llama2, llama3, mistral, zephyr, gemma, phi3

  const std::string& name() const { return family_; }  // one of names()
  // The published template rendered: "qwen2.5", "llama3.1", "mistral-v0.3", "gemma3", ...
  const std::string& variant() const { return variant_; }
  // The system message a ChatML template writes when the conversation has none ("You are Qwen,
  // created by Alibaba Cloud. ..."), read from the template; empty for the others.
  const std::string& default_system() const { return default_system_; }

  // The conversation as pieces; add_generation_prompt appends the assistant's header where the
  // template does. `tools` are the JSON texts of the tools offered (OpenAI's {"type": "function",
  // "function": {...}} objects, keys in the client's order), rendered as transformers'
  // apply_chat_template(tools=...) renders them; none: tools=None. Throws Error (one line) for a
  // conversation the template refuses (with the template's own message), a role other than system,
  // user, assistant and tool, tools, tool calls or tool messages for a template that does not
  // render them (renders_tools()), malformed JSON in a tool or a call's arguments, or no messages.
  std::vector<ChatPiece> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                const std::vector<std::string>& tools = {}) const;
  std::string render_text(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const std::vector<std::string>& tools = {}) const;
  // Whether the template renders tools, tool calls and tool messages: Qwen2.5's, Llama 3.1's and
  // 3.2's, Mistral v0.3's.
  bool renders_tools() const;

  // The texts that end an assistant turn: "<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>",
  // or eos_token for Llama 2, Mistral and Zephyr. The caller maps them to token ids and stops
  // generating there.
  std::vector<std::string> end_of_turn() const;

  // What strftime_now("%d %b %Y") gives the templates that write today's date (Llama 3.2): the
  // local date at each rendering, unless set here ("05 Mar 2025").
  void set_today(const std::string& date) { today_ = date; }

  struct Variant;  // one published template and its renderer (chat_template.cpp)

 private:
  ChatTemplate(const Variant& variant, std::string bos, std::string eos, std::string default_system);

  const Variant* published_;
  std::string family_, variant_, bos_, eos_, default_system_, today_;
};

}  // namespace minfer
