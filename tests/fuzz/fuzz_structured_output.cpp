// libFuzzer target for structured outputs (serve/structured_output.h): the input is what a request
// sends as a constraint. Its first byte chooses the kind (a JSON schema, strict or not, an EBNF
// grammar, a regex, a structural tag) and the rest is the text, compiled with XGrammar over the
// qwen2 fixture's byte-level vocabulary. A text it cannot compile must be refused with ApiError;
// one it compiles is walked for up to kSteps tokens, each the mask's pick by a seed drawn from
// the input. XGrammar's mask can allow a token its matcher refuses (docs/serving.md); the scheduler
// then strikes it and chooses again, and so does the walk (with no limit), checking that a refusal
// leaves the mask as it was and that a mask allowing anything allows an end token or a token the
// matcher accepts. An end token ends the walk, as it ends an answer, untold to the matcher. The
// walk also checks that a rollback of one token gives the mask before it back, and that a finished
// grammar allows an end token. Nothing may crash, leak or hang. Without XGrammar in the build every
// input is refused, as the server does.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/model_files.h"
#include "serve/serve_api.h"
#include "serve/structured_output.h"

namespace {

using minfer::TokenConstraint;
using minfer::serve::OutputConstraint;

constexpr int64_t kModelVocab = 640;  // the fixture's 637 tokens, padded as models pad theirs
constexpr int kSteps = 24;
constexpr int64_t kMaskWords = (kModelVocab + 31) / 32;

struct Vocab {
  std::unique_ptr<minfer::TextTokenizer> tokenizer =
      minfer::load_tokenizer_file(MINFER_SOURCE_DIR "/tests/data/models/qwen2-f32/tokenizer.json");
  minfer::serve::TokenPieces pieces{*tokenizer};
  std::vector<int32_t> stops = tokenizer->eos_ids();
  minfer::serve::StructuredOutputs outputs{*tokenizer, pieces, kModelVocab, stops};
};

// Stops the run with a message: libFuzzer keeps the input that did it.
void require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz_structured_output: %s\n", what);
    std::abort();
  }
}

std::vector<int32_t> allowed_ids(const std::vector<uint32_t>& mask) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < kModelVocab; ++id)
    if ((mask[size_t(id) / 32] >> (id % 32)) & 1u) ids.push_back(id);
  return ids;
}

bool is_stop(const Vocab& v, int32_t id) {
  for (int32_t s : v.stops)
    if (s == id) return true;
  return false;
}

// A token of `ids` (the mask's, not empty), picked by `seed`: an end token, or one the matcher
// accepts, striking the ones it refuses. Each refusal must leave the mask as it was.
int32_t accepted_pick(const Vocab& v, TokenConstraint& c, const std::vector<uint32_t>& mask,
                      std::vector<int32_t> ids, uint64_t& seed) {
  std::vector<uint32_t> after(mask.size());
  while (!ids.empty()) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const size_t pick = (seed >> 33) % ids.size();
    if (is_stop(v, ids[pick]) || c.accept(ids[pick])) return ids[pick];
    c.fill_mask(after.data());
    require(after == mask, "a token the matcher refused changed its mask");
    ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(pick));
  }
  require(false, "the matcher refuses every token its mask allows");
  return -1;
}

// Walks the matcher: a token the mask allows at each step, picked by `seed`.
void walk(const Vocab& v, TokenConstraint& c, uint64_t seed) {
  std::vector<uint32_t> mask(kMaskWords), again(kMaskWords);
  for (int step = 0; step < kSteps; ++step) {
    c.fill_mask(mask.data());
    const std::vector<int32_t> ids = allowed_ids(mask);
    if (c.finished()) {
      bool ends = false;
      for (int32_t id : ids) ends = ends || is_stop(v, id);
      require(ends, "a finished grammar allows no end token");
    }
    if (ids.empty()) return;  // a grammar with no way on: the scheduler ends the answer here
    const int32_t token = accepted_pick(v, c, mask, ids, seed);
    if (is_stop(v, token)) return;
    c.rollback(1);
    c.fill_mask(again.data());
    require(again == mask, "a rollback of one token does not give the mask before it back");
    require(c.accept(token), "the matcher refuses, after a rollback, the token it accepted");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Vocab vocab;
  if (size == 0) return 0;
  static const OutputConstraint::Kind kinds[] = {OutputConstraint::Kind::json_schema,
                                                 OutputConstraint::Kind::json_schema, OutputConstraint::Kind::grammar,
                                                 OutputConstraint::Kind::regex, OutputConstraint::Kind::structural_tag};
  const size_t kind = data[0] % 5;
  const OutputConstraint want{kinds[kind], std::string(reinterpret_cast<const char*>(data + 1), size - 1), kind == 1,
                              "response_format"};
  std::shared_ptr<TokenConstraint> constraint;
  try {
    constraint = vocab.outputs.constrain(want, vocab.stops);
  } catch (const minfer::serve::ApiError&) {
    return 0;
  }
  uint64_t seed = size;
  for (size_t i = 0; i < size; ++i) seed = seed * 131 + data[i];
  walk(vocab, *constraint, seed);
  return 0;
}
