// A request's constraint on the tokens it may sample: a grammar (structured output, tool calls)
// says, before each token, which tokens of the vocabulary may come next. The scheduler asks for
// the allowed set as a bitmask, sets every other token's logit to -infinity before sampling (and
// before the greedy arg-max), and tells the constraint the token it picked.
//
// The engine knows only this interface; serve/structured_output.h implements it with XGrammar's
// matcher (the engine sits below the tokenizers, and a grammar is over the vocabulary's bytes).
#pragma once

#include <cstdint>

namespace minfer {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // The words of a mask over `vocab_size` tokens: bit (t % 32) of word t / 32 is token t.
  static int64_t mask_words(int64_t vocab_size) { return (vocab_size + 31) / 32; }
  // Writes which tokens may come next into mask[mask_words(vocab_size)] (1: allowed). Must not
  // allocate: it runs in the decode loop.
  virtual void fill_mask(uint32_t* mask) = 0;
  // Takes the token sampled from a masked distribution; false when the constraint refuses it
  // (which a correctly applied mask never lets happen).
  virtual bool accept(int32_t token) = 0;
  // True once the tokens so far are a whole sentence of the grammar: an end token may follow (and,
  // where the grammar allows nothing more, only an end token).
  virtual bool finished() const = 0;
  // Forgets the last n accepted tokens (a speculative draft rejected by the target).
  virtual void rollback(int n) = 0;
};

}  // namespace minfer
