#include "tokenizers/piece_split.h"

namespace minfer {

void PieceSplitter::part(size_t begin, size_t end, bool is_match) {
  const Part p{begin, end, is_match};
  switch (behavior_) {
    case SplitBehavior::removed:
      if (!is_match) emit(p);
      break;
    case SplitBehavior::isolated:
      emit(p);
      break;
    case SplitBehavior::merged_with_previous:  // a match joins the text before it
      if (is_match && !previous_match_ && pending_) {
        pending_->end = end;
      } else {
        flush();
        pending_ = p;
      }
      break;
    case SplitBehavior::merged_with_next:  // a match joins the text after it
      if (!is_match && pending_) {
        emit({pending_->begin, end, false});
        pending_.reset();
      } else {
        flush();
        if (is_match) pending_ = p;
        else emit(p);
      }
      break;
    case SplitBehavior::contiguous:  // adjacent parts of one kind join
      if (is_match == previous_match_ && pending_) {
        pending_->end = end;
      } else {
        flush();
        pending_ = p;
      }
      break;
  }
  previous_match_ = is_match;
}

void PieceSplitter::flush() {
  if (pending_) emit(*pending_);
  pending_.reset();
}

void PieceSplitter::emit(const Part& p) const {
  if (p.end > p.begin) emit_({piece_.text.substr(p.begin, p.end - p.begin), piece_.at_start && p.begin == 0});
}

void for_each_literal(const std::string& text, const std::string& literal,
                      const std::function<void(size_t, size_t)>& on_match) {
  if (literal.empty()) return;
  for (size_t pos = 0, hit; (hit = text.find(literal, pos)) != std::string::npos; pos = hit + literal.size())
    on_match(hit, hit + literal.size());
}

}  // namespace minfer
