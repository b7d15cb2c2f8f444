// The text of a completion as its tokens come: each token's bytes (TokenPieces), stop strings found
// on the engine's thread (StopMatcher) and cut from the text (find_stop), and the events' texts in
// whole UTF-8 characters (CompletionText). serve/serve_http.cpp writes answers and streams with them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizers/text_tokenizer.h"

namespace minfer::serve {

// Stop strings found in the bytes of tokens as they come, on the engine's thread. Allocates only
// when made: the window holds the last (longest stop - 1) bytes plus one token's bytes, and its
// capacity is reserved for the longest token piece up front.
class StopMatcher {
 public:
  StopMatcher() = default;
  StopMatcher(std::vector<std::string> stops, size_t longest_piece);
  bool empty() const { return stops_.empty(); }
  // Appends the bytes of one token; true when the text now contains a stop string.
  bool push(const std::string& piece);

 private:
  std::vector<std::string> stops_;
  size_t keep_ = 0;  // bytes kept between tokens: the longest stop string - 1
  std::string window_;
};

// Where the text must be cut for the stop strings: the earliest position at which one begins
// (npos when none does), and, for streaming, how many bytes at the end of `text` could still be
// the start of one (to be held back until the next token decides).
size_t find_stop(const std::string& text, const std::vector<std::string>& stops);
size_t stop_prefix_at_end(const std::string& text, const std::vector<std::string>& stops);

// The bytes each token adds to a stream, computed once for the whole vocabulary so that the
// engine's thread can match stop strings without asking the tokenizer (whose token_bytes
// allocates). note: TextTokenizer::token_bytes(prev, id) depends on prev only through prev == -1
// (the start of a text) and prev == BOS (llama2.c's tokenizer drops the leading space after BOS),
// so two entries per token describe every stream that follows a prompt.
class TokenPieces {
 public:
  explicit TokenPieces(const TextTokenizer& tokenizer);
  // The bytes of `id` after `prev` (a token of the prompt or of the completion); empty for ids the
  // tokenizer does not know (models pad their vocabularies).
  const std::string& piece(int32_t prev, int32_t id) const;
  bool byte_fallback(int32_t id) const {  // TextTokenizer::byte_fallback
    return id >= 0 && static_cast<size_t>(id) < byte_fallback_.size() && byte_fallback_[static_cast<size_t>(id)];
  }
  size_t longest() const { return longest_; }

 private:
  std::vector<std::string> after_token_, after_bos_;  // after_bos_ is empty when it would equal after_token_
  std::vector<bool> byte_fallback_;
  int32_t bos_ = -1;
  size_t longest_ = 0;
  std::string none_;
};

// The text of a stream's events as its tokens come: each token's bytes after the token before it
// (the prompt's last token first, so that a leading space is kept and prompt + text reads as one
// text), in whole UTF-8 characters, cut before the first stop string. Bytes that could begin a
// stop string are held back until a later token decides. The events' texts add up to the whole
// answer's text (the tokenizer's decode), invalid bytes included: a run of byte-fallback tokens is
// held until it ends and then printed as decode prints it (its bytes, or one U+FFFD per token),
// other invalid bytes become one U+FFFD per maximal invalid sequence (utf8::lossy), and an event
// never ends inside a character the next token could still finish.
class CompletionText {
 public:
  CompletionText(const TokenPieces* pieces, int32_t prompt_last, std::vector<std::string> stops);
  // The text that token `id` makes final; once a stop string is complete (stopped()), the text
  // before it, and nothing from then on.
  std::string push(int32_t id);
  std::string finish();  // what was held back at the end (nothing after a stop string)
  bool stopped() const { return stopped_; }

 private:
  const TokenPieces* pieces_;
  int32_t prev_;
  std::string take(const std::string& bytes);  // through the UTF-8 and stop-string hold-backs
  std::string end_run();                       // the byte-fallback run so far, as decode prints it

  std::vector<std::string> stops_;
  Utf8Stream utf8_;
  std::string held_;
  std::string run_;  // the bytes of byte-fallback tokens not yet printed ...
  size_t run_tokens_ = 0;  // ... and how many tokens they came in
  bool stopped_ = false;
};

}  // namespace minfer::serve
