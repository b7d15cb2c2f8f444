// Utf8Stream, and llama2.c's tokenizer.bin behind the TextTokenizer interface.
#include "tokenizers/text_tokenizer.h"

#include "core/error.h"
#include "tokenizers/tokenizer.h"
#include "tokenizers/utf8.h"

namespace minfer {

std::vector<int32_t> TextTokenizer::encode_spans(const std::vector<TextSpan>& spans,
                                                const std::vector<int32_t>&) const {
  std::string text;
  for (const TextSpan& span : spans) text += span.text;
  return encode(text, false);  // a tokenizer without special tokens in text (llama2.c's)
}

std::string Utf8Stream::push(const std::string& bytes) {
  pending_ += bytes;
  const size_t hold = utf8::unfinished_tail(pending_);
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string Utf8Stream::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

namespace {

class Llama2cTokenizer : public TextTokenizer {
 public:
  Llama2cTokenizer(Tokenizer tokenizer, std::string source)
      : tokenizer_(std::move(tokenizer)), source_(std::move(source)) {}

  int64_t vocab_size() const override { return tokenizer_.vocab_size(); }
  std::vector<int32_t> encode(const std::string& text, bool add_special) const override {
    return tokenizer_.encode(text, add_special, false);
  }
  // run.c prints the pieces one after another; the text is their bytes.
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) out += token_bytes(i ? ids[i - 1] : -1, ids[i]);
    return out;
  }
  std::string token_bytes(int32_t prev, int32_t id) const override {
    MINFER_CHECK(prev >= -1 && prev < vocab_size(), source_, ": token id ", prev, " outside [0, ", vocab_size(), ")");
    // note: a stream's first token (prev -1) is taken as following BOS, whose successor run.c
    // prints without its leading space, as SentencePiece's decode does at the start of a text.
    return tokenizer_.decode(prev == -1 ? 1 : prev, id);
  }
  int32_t bos_id() const override { return 1; }
  std::vector<int32_t> eos_ids() const override { return {2}; }
  std::string describe() const override {
    return "llama2.c tokenizer.bin, " + std::to_string(tokenizer_.vocab_size()) + " tokens";
  }

 private:
  Tokenizer tokenizer_;
  std::string source_;
};

}  // namespace

std::unique_ptr<TextTokenizer> load_llama2c_tokenizer(const std::string& path) {
  return std::make_unique<Llama2cTokenizer>(Tokenizer::load(path), path);
}

}  // namespace minfer
