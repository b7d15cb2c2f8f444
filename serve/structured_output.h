// Structured outputs: a request's answer held to a JSON schema, any JSON object, an EBNF grammar,
// a regex or an XGrammar structural tag, with XGrammar (its C++ core, built from the source
// package tools/install-deps.sh fetches; see CMakeLists.txt).
//
// How to use it (one StructuredOutputs per served model, shared by every HTTP thread):
//   StructuredOutputs outputs(tokenizer, pieces, model_vocab, stop_ids);   // at start-up
//   OutputConstraint want{OutputConstraint::Kind::json_schema, schema_text, true, "response_format"};
//   job.constraint = outputs.constrain(want, job_stop_ids);  // ServeRequest's; throws ApiError (400)
// constrain() compiles the grammar (or finds it in the cache of compiled grammars, shared across
// requests and threads) and gives a new matcher, which the scheduler asks for each token's mask
// (engine/token_constraint.h). A grammar that cannot be compiled is refused with ApiError 400
// naming `param` and XGrammar's reason in one bounded line: never an unconstrained answer.
// In a build without XGrammar (have_xgrammar() false) every constrain() throws ApiError 400 with
// kWithoutXGrammar.
//
// The vocabulary XGrammar sees is each token's bytes (TokenPieces); special and control tokens
// (TextTokenizer::special_token_ids) and the ids past the tokenizer's vocabulary are never allowed,
// and the request's stop tokens only where the grammar is complete: the answer ends at one.
// JSON (json_object, json_schema) is compact: no white space but the one space after ',' and ':',
// so that an answer sampled at a high temperature cannot run on in white space.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/token_constraint.h"
#include "tokenizers/text_tokenizer.h"

namespace minfer::serve {

class TokenPieces;  // serve/completion_text.h

// Whether this build has XGrammar; without it, the refusal's message.
bool have_xgrammar();
extern const char* const kWithoutXGrammar;

// The most bytes of a schema's JSON text, a grammar, a regex or a structural tag; check_grammar_size
// throws ApiError (400, `param`) for more.
constexpr size_t kMaxGrammarBytes = 64 * 1024;
void check_grammar_size(const std::string& param, size_t bytes);

// What a request asks its answer to be.
struct OutputConstraint {
  enum class Kind {
    json_object,     // any JSON object (`text` unused)
    json_schema,     // `text`: the schema's JSON text
    grammar,         // `text`: an EBNF grammar (XGrammar's dialect, root rule `root`)
    regex,           // `text`: a regular expression the whole answer matches
    structural_tag,  // `text`: an XGrammar structural tag's JSON (tool calls)
  };
  Kind kind = Kind::json_object;
  std::string text;
  // json_schema: strict (OpenAI's json_schema.strict): no properties beyond those the schema
  // lists where it does not say otherwise. Either way the answer is held to the schema, and
  // properties the schema does not require may be left out.
  bool strict = false;
  std::string param;  // the request field named in a refusal ("response_format", "grammar", ...)
};

// What /metrics reports of the compiler.
struct StructuredOutputStats {
  uint64_t compiles = 0;         // grammars compiled
  uint64_t cache_hits = 0;       // constrain() calls that found the grammar compiled already
  double compile_seconds = 0;    // time spent compiling, in all
};

class StructuredOutputs {
 public:
  // `model_vocab`: the logits' row size (at least the tokenizer's vocabulary; the ids past it are
  // never allowed); `stop_ids`: every token that may end an answer (ModelInfo::stop_ids and the
  // chat template's end of turn).
  StructuredOutputs(const TextTokenizer& tokenizer, const TokenPieces& pieces, int64_t model_vocab,
                    const std::vector<int32_t>& stop_ids);
  ~StructuredOutputs();
  StructuredOutputs(const StructuredOutputs&) = delete;
  StructuredOutputs& operator=(const StructuredOutputs&) = delete;

  // A new matcher for `want`, whose answer ends at one of `stop_ids` (the request's end tokens, of
  // those given to the constructor); throws ApiError (400, param want.param) when it cannot be
  // compiled or is longer than kMaxGrammarBytes. Thread-safe.
  std::shared_ptr<TokenConstraint> constrain(const OutputConstraint& want, const std::vector<int32_t>& stop_ids);
  StructuredOutputStats stats() const;
  // stats() as Prometheus text, for /metrics.
  std::string metrics_text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace minfer::serve
