// A piece of text cut at the matches of a pre-tokenizer step (tokenizers/bpe_tokenizer.cpp),
// one piece at a time: the BPE tokenizers' pre-tokenizer hands each piece on as soon as it is cut,
// so that encoding a long text holds one piece's work, not a list of every piece of the text.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include "tokenizers/bpe_tokenizer.h"

namespace minfer {

struct Piece {
  std::string text;
  bool at_start;  // begins at offset 0 of the original text (Metaspace's prepend_scheme "first")
};

using PieceSink = std::function<void(const Piece&)>;

// Cuts a piece at the [begin, end) ranges of matches given one at a time, in order, by
// `behavior`, as the tokenizers library's NormalizedString::split does, and hands each non-empty
// piece to `emit` as soon as it is known: at most one part waits for the next to say whether it
// merges with it.
class PieceSplitter {
 public:
  PieceSplitter(const Piece& piece, SplitBehavior behavior, const PieceSink& emit)
      : piece_(piece), behavior_(behavior), emit_(emit) {}
  void match(size_t begin, size_t end) {
    if (begin > pos_) part(pos_, begin, false);
    part(begin, end, true);
    pos_ = end;
  }
  void finish() {  // the text after the last match
    if (pos_ < piece_.text.size()) part(pos_, piece_.text.size(), false);
    flush();
  }

 private:
  struct Part {
    size_t begin, end;
    bool match;
  };
  void part(size_t begin, size_t end, bool is_match);
  void flush();
  void emit(const Part& p) const;

  const Piece& piece_;
  SplitBehavior behavior_;
  const PieceSink& emit_;
  size_t pos_ = 0;  // the end of the last match
  std::optional<Part> pending_;
  bool previous_match_ = false;
};

// Calls on_match(begin, end) for each occurrence of `literal` in `text`, left to right, none
// overlapping (none when `literal` is empty).
void for_each_literal(const std::string& text, const std::string& literal,
                      const std::function<void(size_t, size_t)>& on_match);

// Splits `piece` at the matches of `find` (a function of the text and a match callback).
template <class Find>
void split_piece(const Piece& piece, SplitBehavior behavior, Find&& find, const PieceSink& emit) {
  PieceSplitter splitter(piece, behavior, emit);
  find(piece.text, [&](size_t begin, size_t end) { splitter.match(begin, end); });
  splitter.finish();
}

}  // namespace minfer
