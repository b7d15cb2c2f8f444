// Every tokenizer minfer reads, behind one interface:
//   - llama2.c's tokenizer.bin: run.c's encode, best-score merges (tokenizers/tokenizer.h);
//   - SentencePiece-style BPE with byte fallback: a tokenizer.json whose model is BPE with
//     byte_fallback and a "▁" normalizer or pre-tokenizer (Llama 2, TinyLlama, Mistral), or GGUF
//     metadata with tokenizer.ggml.model = "llama" (scores);
//   - byte-level BPE (GPT-2 style): a tokenizer.json with a ByteLevel pre-tokenizer or decoder and
//     Split regexes (Llama 3, SmolLM), or GGUF metadata with tokenizer.ggml.model = "gpt2"
//     (merges, and tokenizer.ggml.pre naming the pre-tokenizer's regexes).
// Encoding matches the tokenizers library (tokenizer.json) and llama.cpp (GGUF) id for id;
// special and added tokens written in the text are matched whole and never split; merging is
// O(n log n) in the text's length (tokenizers/bpe.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"

namespace minfer {

constexpr size_t kNoTokenLimit = std::numeric_limits<size_t>::max();  // encode's max_ids when none is given

// What encode and encode_spans throw, given max_ids, for a text of more than max_ids tokens: known
// from its length alone, before any encoding (more than max_ids x max_bytes_per_token() bytes), or
// found as the ids passed max_ids, where the encoding stopped.
class TooManyTokens : public Error {
 public:
  TooManyTokens(size_t max_ids, size_t text_bytes, size_t bytes_per_token);
  size_t max_ids;
  size_t text_bytes;
  size_t bytes_per_token;  // the bound that refused the text by its length; 0 when the encoding found it
};
// Throws TooManyTokens when a text of `text_bytes` has more than `max_ids` tokens for certain, each
// standing for at most `bytes_per_token` bytes (0: no bound). Overflow-safe.
void check_text_bytes(size_t text_bytes, size_t max_ids, size_t bytes_per_token);

// A piece of a text that says whether special tokens written in it are recognised.
struct TextSpan {
  std::string text;
  bool special = false;
};

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  virtual int64_t vocab_size() const = 0;
  // The ids of `text`. With add_special, the special tokens the tokenizer's own configuration
  // puts around a text: BOS for Llama 2 and Llama 3 (a tokenizer.json's TemplateProcessing
  // post-processor, GGUF's tokenizer.ggml.add_bos_token).
  // With max_ids, a text of more than max_ids ids (those of add_special included) throws
  // TooManyTokens, before it is encoded when its length tells, else as soon as its ids pass
  // max_ids. Memory: the ids, plus the text's copies and one piece's work (never a list of every
  // piece of the text), so that a long text costs little more than its bytes.
  virtual std::vector<int32_t> encode(const std::string& text, bool add_special,
                                      size_t max_ids = kNoTokenLimit) const = 0;
  // The ids of the spans' text, one text, as encode(text, false) gives them, except that special
  // tokens are recognised only inside spans marked special: in the others "<|im_end|>" is the
  // ordinary tokens of its characters (llama.cpp's parse_special = false). A chat's messages are
  // encoded this way inside their template (tokenizers/chat_format.h), so that a user cannot end
  // a turn or forge another role. Added tokens that are not special are still matched anywhere,
  // but for `markers`, which are held to the spans as special ones are (a template's markers that
  // a fine-tune added as ordinary tokens).
  // max_ids as for encode.
  virtual std::vector<int32_t> encode_spans(const std::vector<TextSpan>& spans, const std::vector<int32_t>& markers,
                                            size_t max_ids = kNoTokenLimit) const;
  // encode's ids with the special tokens written in the text read as the ordinary tokens of their
  // characters: "<|im_start|>" is "<", "|", "im", ... (llama.cpp's parse_special = false,
  // llama-tokenize's --no-parse-special). Added tokens that are not special are still matched, as
  // in encode_spans; add_special still puts the tokenizer's own special tokens (BOS) around the
  // text. max_ids as for encode.
  virtual std::vector<int32_t> encode_plain(const std::string& text, bool add_special,
                                            size_t max_ids = kNoTokenLimit) const;
  // The most bytes of text one token stands for, so that a text of more than n times this many
  // bytes has more than n tokens (for llama2.c's tokenizer, counting the bytes before the first
  // NUL, where its encoding stops). 0 when no bound holds: a tokenizer that drops characters it
  // lacks or fuses a run of them into one unknown token, an added token that swallows the white
  // space beside it, a pre-tokenizer that removes text, or a normalizer that shortens it.
  virtual size_t max_bytes_per_token() const = 0;
  // The model's chat template (Jinja text: GGUF's tokenizer.chat_template, tokenizer_config.json's
  // chat_template or chat_template.jinja beside it); "" when the files carry none. Throws Error
  // with one line when they carry a malformed one (the tokenizer itself still loads).
  virtual std::string chat_template() const { return {}; }
  // The text of `ids`, as the tokenizers library decodes them with special tokens kept.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // The bytes token `id` adds when it follows `prev` in a stream of generated tokens (-1: the
  // first token), for printing as tokens arrive; may end inside a UTF-8 character (Utf8Stream).
  virtual std::string token_bytes(int32_t prev, int32_t id) const = 0;
  // Whether `id` is a byte token of a ByteFallback decoder (SentencePiece's <0xNN>): decode()
  // turns a run of such tokens into its bytes when they are valid UTF-8, and into one U+FFFD per
  // token when they are not, so a stream must hold a run until it ends to print what decode does.
  virtual bool byte_fallback(int32_t id) const {
    (void)id;
    return false;
  }
  // The special (control) tokens: those encode_spans recognises only inside special spans. A
  // grammar's text is never made of one (serve/structured_output.h).
  virtual std::vector<int32_t> special_token_ids() const { return {}; }
  virtual int32_t bos_id() const = 0;              // -1 when the vocabulary has none
  virtual std::vector<int32_t> eos_ids() const = 0;  // the tokens that end a generation
  virtual std::string describe() const = 0;        // "byte-level BPE, 49152 tokens, 48900 merges"
};

// Holds back the bytes of an unfinished UTF-8 character, so that a stream prints whole
// characters only (a character split across two byte-fallback tokens prints once both came).
class Utf8Stream {
 public:
  // Appends `bytes`; returns what now forms whole characters (invalid bytes pass through).
  std::string push(const std::string& bytes);
  std::string flush();  // whatever is left, at the end of the stream

 private:
  std::string pending_;
};

// A tokenizer.json (the Hugging Face tokenizers library's format) and, when present beside it,
// tokenizer_config.json and special_tokens_map.json (bos_token, eos_token, chat_template). Anything the
// format allows that minfer does not implement (another model type, a normalizer or
// pre-tokenizer it does not know) is refused with one line naming it.
std::unique_ptr<TextTokenizer> load_tokenizer_json(const std::string& path);

// The vocabulary and rules GGUF metadata carries (tokenizer.ggml.*), filled by the GGUF reader.
struct GgufVocab {
  std::string model;                 // tokenizer.ggml.model: "llama" or "gpt2"
  std::string pre;                   // tokenizer.ggml.pre: "default", "llama-bpe", "smollm", ...
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens
  std::vector<float> scores;         // tokenizer.ggml.scores (llama)
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type: 1 normal, 2 unknown, 3 control,
                                     // 4 user-defined, 5 unused, 6 byte
  std::vector<std::string> merges;   // tokenizer.ggml.merges (gpt2): "left right"
  int32_t bos_id = -1, eos_id = -1, unknown_id = -1, padding_id = -1;
  std::vector<int32_t> eot_ids;      // tokenizer.ggml.eot_token_id, eom_token_id: also end generation
  bool add_bos = true, add_eos = false;
  bool add_space_prefix = true;      // tokenizer.ggml.add_space_prefix (llama model)
  std::string chat_template;         // tokenizer.chat_template
};
std::unique_ptr<TextTokenizer> make_gguf_tokenizer(const GgufVocab& vocab, const std::string& source);

// llama2.c's tokenizer.bin as a TextTokenizer (encode adds BOS with add_special, as run.c does).
std::unique_ptr<TextTokenizer> load_llama2c_tokenizer(const std::string& path);

}  // namespace minfer
