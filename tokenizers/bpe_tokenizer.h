// The one BPE engine behind tokenizer.json and GGUF vocabularies: a pipeline the loaders fill in
// (tokenizers/tokenizer_json.cpp, tokenizers/gguf_tokenizer.cpp) and one implementation of encode/decode.
//
// encode(text): added tokens written in the text are cut out whole (AddedTokenMatch says how);
// each remaining segment is normalized (NormalizeStep), split into pieces (PreTokenizeStep), and
// each piece becomes symbols, one per character (byte-level: one per byte, as GPT-2's printable
// stand-in), which merge pairwise by tokenizers/bpe.h until none merges (MergeRule); characters the
// vocabulary lacks become byte pieces <0xXX>, the unknown token, or are dropped, as the model says.
// With add_special, the post-processor's tokens go around the ids.
// decode(ids): the decoder steps (DecodeStep) of the tokenizers library, on the tokens' texts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizers/regex_split.h"
#include "tokenizers/text_tokenizer.h"

namespace minfer {

enum class MergeRule {
  ranked,  // a merges list: the pair listed first merges first (tokenizers library, GGUF "gpt2")
  scored,  // the merged token's score, highest first (SentencePiece, llama.cpp's SPM, GGUF "llama")
};

// Unknown characters, after the vocabulary and byte pieces failed.
enum class UnknownChars {
  unk_or_drop,  // the unknown token (fused when fuse_unk) if there is one, else dropped (tokenizers)
  spm_bytes,    // kept as a symbol that may still merge; at the end, its bytes' <0xXX> pieces (llama.cpp SPM)
  raw_bytes,    // at the end, each raw byte as a one-byte token where one exists (llama.cpp BPE)
};

struct NormalizeStep {
  enum class Kind { prepend, replace } kind;
  std::string text;         // prepend: what is prepended (to a non-empty text); replace: the pattern
  std::string replacement;  // replace: what each occurrence becomes
};

enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

struct PreTokenizeStep {
  enum class Kind { split, metaspace, byte_level } kind;
  // split: by a regular expression, or by a literal string when regex is null.
  std::shared_ptr<const Regex> regex;
  std::string literal;
  SplitBehavior behavior = SplitBehavior::isolated;
  // metaspace: spaces become `replacement`, which is prepended per `prepend`; split before each.
  std::string replacement;
  enum class Prepend { always, first, never } prepend = Prepend::always;
  bool split = false;
  // byte_level: a space before each piece that lacks one; then GPT-2's regex when regex is set.
  bool add_prefix_space = false;
};

struct DecodeStep {
  enum class Kind { replace, byte_fallback, fuse, strip, metaspace, byte_level } kind;
  std::string from, to;  // replace: every `from` becomes `to`; strip: `from` is the character
  size_t strip_start = 0;    // strip: up to this many leading `from` characters go
  std::string replacement;   // metaspace: the character that stands for a space
  bool metaspace_prepends = true;  // metaspace: the first token's replacement characters are dropped
};

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false, rstrip = false;  // white space before / after the match is swallowed
  bool normalized = false;              // matched in the normalized text (after normalizers)
};

enum class AddedTokenMatch {
  leftmost_longest,  // the tokenizers library: non-normalized tokens first, then normalized ones
  longest_first,     // llama.cpp: the longest token first everywhere, then the next longest, ...
};

struct BpeSpec {
  std::string source;       // the file or description, for errors
  std::string description;  // describe()
  std::vector<std::string> tokens;  // id -> text as the vocabulary spells it
  std::vector<float> scores;        // MergeRule::scored
  struct Merge {
    int32_t left, right, merged;
  };
  std::vector<Merge> merges;  // MergeRule::ranked, rank = index; of repeated pairs the first counts
  MergeRule rule = MergeRule::ranked;
  bool byte_level = false;     // pieces are mapped byte by byte to GPT-2's printable characters
  bool byte_fallback = false;  // characters absent from the vocabulary become <0xXX> pieces
  UnknownChars unknown = UnknownChars::unk_or_drop;
  int32_t unk_id = -1;
  bool fuse_unk = false;
  bool ignore_merges = false;  // a piece that is a token as a whole is that token
  std::vector<NormalizeStep> normalizer;
  std::vector<PreTokenizeStep> pre_tokenizer;
  std::vector<AddedToken> added;
  AddedTokenMatch match = AddedTokenMatch::leftmost_longest;
  std::vector<int32_t> prefix, suffix;  // the post-processor's tokens around a text (add_special)
  bool has_decoder = true;              // none: tokens joined with spaces, as the library does
  std::vector<DecodeStep> decoder;
  std::vector<bool> decode_verbatim;  // tokens decoded as their text, bypassing the decoder
  int32_t bos = -1;
  std::vector<int32_t> eos;
  std::string chat_template;  // the model's Jinja chat template, "" when it has none
  // Why tokenizer_config.json's chat_template could not be read ("" when it could): the tokenizer
  // loads, and only chat refuses, with this line (transformers reads it in apply_chat_template).
  std::string chat_template_error;
};

// Checks the spec's ids and builds its lookup tables; throws Error naming spec.source.
std::unique_ptr<TextTokenizer> make_bpe_tokenizer(BpeSpec spec);

}  // namespace minfer
