// make_gguf_tokenizer: GGUF tokenizer metadata as llama.cpp (src/llama-vocab.cpp) tokenizes it.
//
//   "llama"  llama.cpp's SentencePiece tokenizer (llm_tokenizer_spm): each text fragment gets a
//            leading space when add_space_prefix (the first fragment and each after a special
//            token), spaces become "▁", characters become symbols, and the adjacent pair whose
//            concatenation is a token with the highest score merges first (of equal scores the
//            leftmost); symbols that are no token become their bytes' <0xXX> pieces.
//   "gpt2"   llama.cpp's byte-level BPE (llm_tokenizer_bpe): the regexes of tokenizer.ggml.pre
//            split each fragment, bytes map to GPT-2's printable characters, merges by rank.
// In both, tokens of type control (3), user-defined (4) and unknown (2) written in the text are
// cut out whole, the longest first. With add_special, BOS (add_bos) and EOS (add_eos) go around.
// decode() follows the tokenizers library's decoders for the same family (llama.cpp's
// detokenizer without its clean-up of spaces, which would not give back the text), with control
// and user-defined tokens as their text.
#include <algorithm>
#include <unordered_map>

#include "core/error.h"
#include "tokenizers/bpe_tokenizer.h"

namespace minfer {

namespace {

enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// llama.cpp's pre-tokenizer regexes by tokenizer.ggml.pre (llm_tokenizer_bpe's constructor);
// each splits the pieces the previous one left, keeping matches and what lies between.
std::vector<std::string> pre_tokenizer_regexes(const std::string& pre, const std::string& source, bool* ignore_merges) {
  const std::string gpt2_without_trailing_space =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
  *ignore_merges = false;
  if (pre == "default") return {R"([\p{P}\$\+<=>\^~\|]+)", gpt2_without_trailing_space, R"(\p{N}+)", "[0-9][0-9][0-9]"};
  if (pre == "gpt-2") return {gpt2_without_trailing_space};
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    *ignore_merges = true;
    // llama.cpp writes Llama 3's (?i:...) as explicit case pairs: its regex engine has no (?i).
    return {R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
  }
  if (pre == "smollm") return {R"(\p{N})", gpt2_without_trailing_space};
  // Qwen2's is Llama 3's with single digits (\p{N}, not \p{N}{1,3}; Qwen's vocabulary has no
  // merges of digits, so the two split its texts alike), and its merges apply to every piece.
  if (pre == "qwen2")
    return {R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
  fail(source, ": tokenizer.ggml.pre = '", pre, "' is not supported (supported: default, gpt-2, llama-bpe, ",
       "llama3, llama-v3, smollm, qwen2)");
}

DecodeStep decode_step(DecodeStep::Kind kind, const std::string& from = "", const std::string& to = "") {
  DecodeStep step;
  step.kind = kind;
  step.from = from;
  step.to = to;
  return step;
}

int32_t token_type(const GgufVocab& vocab, size_t id) {
  return vocab.token_types.empty() ? int32_t(kNormal) : vocab.token_types[id];
}

// The checks that need no tokenizer family: sizes, types and special ids within the vocabulary.
void check_vocab(const GgufVocab& vocab, const std::string& source) {
  const size_t n = vocab.tokens.size();
  MINFER_CHECK(n > 0, source, ": tokenizer.ggml.tokens is empty");
  MINFER_CHECK(vocab.token_types.empty() || vocab.token_types.size() == n, source, ": tokenizer.ggml.token_type has ",
               vocab.token_types.size(), " entries for ", n, " tokens");
  for (size_t i = 0; i < vocab.token_types.size(); ++i)
    MINFER_CHECK(vocab.token_types[i] >= 0 && vocab.token_types[i] <= kByte, source, ": token ", i, " has type ",
                 vocab.token_types[i], ", not one of 0 .. 6");
  auto check_id = [&](int32_t id, const char* what) {
    MINFER_CHECK(id >= -1 && id < static_cast<int64_t>(n), source, ": ", what, " = ", id, " is outside [0, ", n, ")");
  };
  check_id(vocab.bos_id, "tokenizer.ggml.bos_token_id");
  check_id(vocab.eos_id, "tokenizer.ggml.eos_token_id");
  check_id(vocab.unknown_id, "tokenizer.ggml.unknown_token_id");
  check_id(vocab.padding_id, "tokenizer.ggml.padding_token_id");
  for (int32_t id : vocab.eot_ids) check_id(id, "tokenizer.ggml.eot_token_id");
  MINFER_CHECK(!vocab.add_bos || vocab.bos_id >= 0, source,
               ": tokenizer.ggml.add_bos_token is true but there is no BOS token");
  MINFER_CHECK(!vocab.add_eos || vocab.eos_id >= 0, source,
               ": tokenizer.ggml.add_eos_token is true but there is no EOS token");
}

// What both families share: the tokens, the special ids (EOS and every EOT stop), BOS and EOS
// around a text, and the control, user-defined and unknown tokens cut out of it whole.
BpeSpec special_tokens_spec(const GgufVocab& vocab, const std::string& source) {
  const size_t n = vocab.tokens.size();
  BpeSpec spec;
  spec.source = source;
  spec.tokens = vocab.tokens;
  spec.match = AddedTokenMatch::longest_first;
  spec.unk_id = vocab.unknown_id;
  spec.bos = vocab.bos_id;
  spec.chat_template = vocab.chat_template;
  if (vocab.eos_id >= 0) spec.eos.push_back(vocab.eos_id);
  for (int32_t id : vocab.eot_ids)
    if (id >= 0 && std::find(spec.eos.begin(), spec.eos.end(), id) == spec.eos.end()) spec.eos.push_back(id);
  if (vocab.add_bos) spec.prefix.push_back(vocab.bos_id);
  if (vocab.add_eos) spec.suffix.push_back(vocab.eos_id);
  spec.decode_verbatim.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    const int32_t type = token_type(vocab, i);
    MINFER_CHECK(!vocab.tokens[i].empty() || type == kUnused || type == kNormal, source, ": token ", i, " of type ",
                 type, " is empty");
    if ((type == kControl || type == kUserDefined || type == kUnknown) && !vocab.tokens[i].empty()) {
      AddedToken t;
      t.content = vocab.tokens[i];
      t.id = static_cast<int32_t>(i);
      t.special = type != kUserDefined;
      spec.added.push_back(t);
    }
    spec.decode_verbatim[i] = type == kControl || type == kUserDefined;
  }
  return spec;
}

// "llama": merges by score, spaces as "▁" (with a leading one when add_space_prefix), unknown
// characters as their bytes' pieces.
void add_sentencepiece_rules(const GgufVocab& vocab, const std::string& source, BpeSpec* spec) {
  const size_t n = vocab.tokens.size();
  MINFER_CHECK(vocab.scores.size() == n, source, ": tokenizer.ggml.scores has ", vocab.scores.size(), " entries for ",
               n, " tokens");
  spec->rule = MergeRule::scored;
  spec->scores = vocab.scores;
  spec->unknown = UnknownChars::spm_bytes;
  if (vocab.add_space_prefix) spec->normalizer.push_back({NormalizeStep::Kind::prepend, " ", ""});
  spec->normalizer.push_back({NormalizeStep::Kind::replace, " ", "\xE2\x96\x81"});
  spec->decoder = {decode_step(DecodeStep::Kind::replace, "\xE2\x96\x81", " "),
                   decode_step(DecodeStep::Kind::byte_fallback), decode_step(DecodeStep::Kind::fuse)};
  if (vocab.add_space_prefix) {
    DecodeStep strip = decode_step(DecodeStep::Kind::strip, " ");
    strip.strip_start = 1;
    spec->decoder.push_back(strip);
  }
  spec->description = "SentencePiece-style BPE (GGUF llama), " + std::to_string(n) + " tokens";
}

// tokenizer.ggml.merges ("left right", by rank) as the ids of left, right and what they merge into.
std::vector<BpeSpec::Merge> ranked_merges(const GgufVocab& vocab, const std::string& source) {
  std::unordered_map<std::string, int32_t> id_of;
  id_of.reserve(vocab.tokens.size());
  // Of equal texts the last id counts, as in llama.cpp.
  for (size_t i = 0; i < vocab.tokens.size(); ++i) id_of[vocab.tokens[i]] = static_cast<int32_t>(i);
  auto find = [&](const std::string& text, size_t index) {
    auto it = id_of.find(text);
    if (it == id_of.end())
      fail(source, ": tokenizer.ggml.merges[", index, "] names '", text, "', which is not a token");
    return it->second;
  };
  std::vector<BpeSpec::Merge> merges;
  merges.reserve(vocab.merges.size());
  for (size_t i = 0; i < vocab.merges.size(); ++i) {
    const std::string& m = vocab.merges[i];
    const size_t space = m.find(' ', 1);  // llama.cpp: the first space after the first character
    MINFER_CHECK(space != std::string::npos && space + 1 < m.size(), source, ": tokenizer.ggml.merges[", i,
                 "] = '", m, "' is not two tokens separated by a space");
    const std::string left = m.substr(0, space), right = m.substr(space + 1);
    merges.push_back({find(left, i), find(right, i), find(left + right, i)});
  }
  return merges;
}

// "gpt2": pieces split by tokenizer.ggml.pre's regexes, bytes as GPT-2's characters, merges by rank.
void add_byte_level_rules(const GgufVocab& vocab, const std::string& source, BpeSpec* spec) {
  bool ignore_merges = false;
  for (const std::string& pattern : pre_tokenizer_regexes(vocab.pre, source, &ignore_merges)) {
    PreTokenizeStep step;
    step.kind = PreTokenizeStep::Kind::split;
    step.regex = std::make_shared<Regex>(pattern, source + ": tokenizer.ggml.pre " + vocab.pre);
    step.behavior = SplitBehavior::isolated;
    spec->pre_tokenizer.push_back(std::move(step));
  }
  spec->ignore_merges = ignore_merges;
  spec->byte_level = true;
  spec->unknown = UnknownChars::raw_bytes;
  spec->rule = MergeRule::ranked;
  spec->merges = ranked_merges(vocab, source);
  spec->decoder = {decode_step(DecodeStep::Kind::byte_level)};
  spec->description = "byte-level BPE (GGUF gpt2, pre " + vocab.pre + "), " + std::to_string(vocab.tokens.size()) +
                      " tokens, " + std::to_string(vocab.merges.size()) + " merges";
}

}  // namespace

std::unique_ptr<TextTokenizer> make_gguf_tokenizer(const GgufVocab& vocab, const std::string& source) {
  check_vocab(vocab, source);
  BpeSpec spec = special_tokens_spec(vocab, source);
  if (vocab.model == "llama")
    add_sentencepiece_rules(vocab, source, &spec);
  else if (vocab.model == "gpt2")
    add_byte_level_rules(vocab, source, &spec);
  else
    fail(source, ": tokenizer.ggml.model = '", vocab.model, "' is not supported (supported: llama, gpt2)");
  return make_bpe_tokenizer(std::move(spec));
}

}  // namespace minfer
