#include "serve/structured_output.h"

#include <algorithm>
#include <chrono>
#include <list>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#if MINFER_HAVE_XGRAMMAR
#include <xgrammar/xgrammar.h>
#endif

#include <nlohmann/json.hpp>

#include "serve/serve_api.h"

namespace minfer::serve {

const char* const kWithoutXGrammar =
    "this minfer was built without XGrammar, so response_format, grammar and regex are not available "
    "(tools/install-deps.sh fetches it; then rebuild)";

bool have_xgrammar() { return MINFER_HAVE_XGRAMMAR; }

void check_grammar_size(const std::string& param, size_t bytes) {
  if (bytes > kMaxGrammarBytes)
    throw ApiError{400, detail::concat(param, ": ", bytes, " bytes, more than the ", kMaxGrammarBytes, " allowed"),
                   param, ""};
}

#if MINFER_HAVE_XGRAMMAR

namespace {

// XGrammar's warnings while a grammar is converted on this thread (CMakeLists.txt builds it with
// XGRAMMAR_LOG_CUSTOMIZE, so its log goes to LogMessageImpl below): a schema keyword it ignores
// ("Keyword uniqueItems is not supported") is a refusal, never an answer the schema does not hold.
constexpr size_t kMaxWarnings = 8;
thread_local std::vector<std::string>* g_warnings = nullptr;

const char* kind_name(OutputConstraint::Kind kind) {
  switch (kind) {
    case OutputConstraint::Kind::json_object: return "json_object";
    case OutputConstraint::Kind::json_schema: return "json_schema";
    case OutputConstraint::Kind::grammar: return "grammar";
    case OutputConstraint::Kind::regex: return "regex";
    case OutputConstraint::Kind::structural_tag: return "structural_tag";
  }
  return "?";
}

// A grammar XGrammar would compile but not enforce whole: a schema keyword it ignores.
struct NotEnforced : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The JSON Schema keywords XGrammar 0.2.9 ignores without a word (it warns of them only when
// asked to): a schema with one is refused rather than half enforced.
constexpr const char* kUnenforcedKeywords[] = {"not", "if", "then", "else", "dependentRequired", "dependentSchemas",
                                               "dependencies", "uniqueItems", "contains", "minContains", "maxContains"};

// Throws NotEnforced naming the first of kUnenforcedKeywords that a schema (JSON text) uses.
// Walks the subschemas only (a property may be named "if"), with a stack, not recursion.
void check_enforced_keywords(const std::string& schema_text) {
  using json = nlohmann::json;
  const json schema = json::parse(schema_text, nullptr, false);
  if (schema.is_discarded()) return;  // XGrammar says what is wrong with it
  std::vector<const json*> todo = {&schema};
  while (!todo.empty()) {
    const json& s = *todo.back();
    todo.pop_back();
    if (!s.is_object()) continue;
    for (const char* keyword : kUnenforcedKeywords)
      if (s.contains(keyword))
        throw NotEnforced(detail::concat("the JSON Schema keyword '", keyword, "' is not supported"));
    for (const auto& [key, v] : s.items()) {
      if (key == "properties" || key == "patternProperties" || key == "$defs" || key == "definitions") {
        if (v.is_object())
          for (const auto& [name, sub] : v.items()) todo.push_back(&sub);
      } else if (key == "items" || key == "prefixItems" || key == "allOf" || key == "anyOf" || key == "oneOf") {
        if (v.is_array())
          for (const json& sub : v) todo.push_back(&sub);
        else
          todo.push_back(&v);
      } else if (key == "additionalProperties" || key == "unevaluatedProperties" || key == "unevaluatedItems" ||
                 key == "additionalItems" || key == "propertyNames") {
        todo.push_back(&v);
      }
    }
  }
}

// The grammar of `want`, converted on this thread; throws std::runtime_error with XGrammar's
// reason, or NotEnforced with its first warning.
xgrammar::Grammar convert(const OutputConstraint& want, const xgrammar::TokenizerInfo& info) {
  std::vector<std::string> warnings;
  g_warnings = &warnings;
  struct Reset {
    ~Reset() { g_warnings = nullptr; }
  } reset;
  // Compact JSON: ", " and ": " between tokens and no other white space (any_whitespace = false).
  auto json = [](const std::string& schema, bool strict) {
    return xgrammar::Grammar::FromJSONSchema(schema, false, std::nullopt, std::nullopt, strict);
  };
  std::optional<xgrammar::Grammar> grammar;
  switch (want.kind) {
    case OutputConstraint::Kind::json_object: grammar = json(R"({"type": "object"})", false); break;
    case OutputConstraint::Kind::json_schema:
      check_enforced_keywords(want.text);
      grammar = json(want.text, want.strict);
      break;
    case OutputConstraint::Kind::grammar: grammar = xgrammar::Grammar::FromEBNF(want.text); break;
    case OutputConstraint::Kind::regex: grammar = xgrammar::Grammar::FromRegex(want.text); break;
    case OutputConstraint::Kind::structural_tag: {
      auto tag = xgrammar::Grammar::FromStructuralTag(want.text, info);
      if (auto* g = std::get_if<xgrammar::Grammar>(&tag)) {
        grammar = std::move(*g);
        break;
      }
      throw std::runtime_error(std::visit([](const auto& e) -> std::string { return e.what(); },
                                          std::get<xgrammar::StructuralTagError>(tag)));
    }
  }
  if (!warnings.empty()) throw NotEnforced(warnings.front());
  return std::move(*grammar);
}

// The matcher of one request.
class GrammarConstraint : public TokenConstraint {
 public:
  GrammarConstraint(const xgrammar::CompiledGrammar& grammar, int64_t vocab, const std::vector<int32_t>& stop_ids)
      : matcher_(grammar, stop_ids), vocab_(vocab), stop_ids_(stop_ids) {}

  void fill_mask(uint32_t* mask) override {
    // After an end token (a request that goes on past it: ignore_eos), or should XGrammar fail,
    // the end tokens alone.
    if (!matcher_.IsTerminated()) {
      int64_t shape[1] = {mask_words(vocab_)};
      DLTensor bitmask{mask, DLDevice{kDLCPU, 0}, 1, xgrammar::GetBitmaskDLType(), shape, nullptr, 0};
      try {
        matcher_.FillNextTokenBitmask(&bitmask);
        return;
      } catch (const std::exception&) {
      }
    }
    std::fill(mask, mask + mask_words(vocab_), 0u);
    for (int32_t id : stop_ids_) mask[id / 32] |= 1u << (id % 32);
  }
  bool accept(int32_t token) override {
    try {
      return matcher_.AcceptToken(token);
    } catch (const std::exception&) {
      return false;
    }
  }
  bool finished() const override { return matcher_.IsTerminated() || matcher_.IsCompleted(); }
  void rollback(int n) override { matcher_.Rollback(n); }

 private:
  xgrammar::GrammarMatcher matcher_;
  int64_t vocab_;
  std::vector<int32_t> stop_ids_;
};

// XGrammar's vocabulary: each token's bytes, "" (never allowed) for special tokens, BOS and the
// ids past the tokenizer's vocabulary.
xgrammar::TokenizerInfo tokenizer_info(const TextTokenizer& tokenizer, const TokenPieces& pieces, int64_t vocab,
                                       const std::vector<int32_t>& stop_ids) {
  const int64_t n = std::min(vocab, tokenizer.vocab_size());
  const int32_t other = tokenizer.bos_id() == 0 && n > 1 ? 1 : 0;  // a previous token that is not BOS
  std::vector<std::string> bytes(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) bytes[size_t(id)] = pieces.piece(other, id);
  for (int32_t id : tokenizer.special_token_ids())
    if (id >= 0 && id < n) bytes[size_t(id)].clear();
  if (tokenizer.bos_id() >= 0 && tokenizer.bos_id() < n) bytes[size_t(tokenizer.bos_id())].clear();
  return xgrammar::TokenizerInfo(bytes, xgrammar::VocabType::RAW, static_cast<int>(vocab), stop_ids);
}

// XGrammar's reason in one bounded line.
std::string reason(const std::exception& e) { return one_line(e.what(), 200); }

}  // namespace

// The compiled grammars, the most recently used first, at most kMaxCached of them and kMaxCacheBytes
// (XGrammar's own cache is off: this one also counts hits).
struct StructuredOutputs::Impl {
  static constexpr size_t kMaxCached = 64;
  static constexpr size_t kMaxCacheBytes = size_t(512) << 20;

  Impl(xgrammar::TokenizerInfo info_, int64_t vocab_)
      : info(std::move(info_)), compiler(info, 2, false), vocab(vocab_) {}

  xgrammar::TokenizerInfo info;
  xgrammar::GrammarCompiler compiler;
  int64_t vocab;

  mutable std::mutex mutex;  // guards the cache and stats
  // note: one compile at a time, whatever the HTTP threads: XGrammar cannot stop a compile midway,
  // and each takes the compiler's 2 threads, so concurrent compiles of many large schemas (a
  // hostile client's) would take the cores from the engine; queued ones take the cache's answer
  // when an earlier compile was of the same grammar.
  std::mutex compiling;
  using Entry = std::pair<std::string, xgrammar::CompiledGrammar>;
  std::list<Entry> cache;
  std::unordered_map<std::string, std::list<Entry>::iterator> index;
  size_t cache_bytes = 0;
  StructuredOutputStats stats;

  std::optional<xgrammar::CompiledGrammar> find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = index.find(key);
    if (it == index.end()) return std::nullopt;
    cache.splice(cache.begin(), cache, it->second);
    ++stats.cache_hits;
    return it->second->second;
  }

  void remember(const std::string& key, const xgrammar::CompiledGrammar& grammar, double seconds) {
    std::lock_guard<std::mutex> lock(mutex);
    ++stats.compiles;
    stats.compile_seconds += seconds;
    cache.emplace_front(key, grammar);
    index[key] = cache.begin();
    cache_bytes += grammar.MemorySizeBytes();
    while (cache.size() > 1 && (cache.size() > kMaxCached || cache_bytes > kMaxCacheBytes)) {
      cache_bytes -= std::min(cache_bytes, cache.back().second.MemorySizeBytes());
      index.erase(cache.back().first);
      cache.pop_back();
    }
  }
};

StructuredOutputs::StructuredOutputs(const TextTokenizer& tokenizer, const TokenPieces& pieces, int64_t model_vocab,
                                     const std::vector<int32_t>& stop_ids)
    : impl_(std::make_unique<Impl>(tokenizer_info(tokenizer, pieces, model_vocab, stop_ids), model_vocab)) {}

std::shared_ptr<TokenConstraint> StructuredOutputs::constrain(const OutputConstraint& want,
                                                              const std::vector<int32_t>& stop_ids) {
  check_grammar_size(want.param, want.text.size());
  for (int32_t id : stop_ids)
    MINFER_CHECK(id >= 0 && id < impl_->vocab, "stop token ", id, " is outside the vocabulary");
  const std::string key = detail::concat(kind_name(want.kind), want.strict ? "+strict:" : ":", want.text);
  std::optional<xgrammar::CompiledGrammar> compiled = impl_->find(key);
  std::unique_lock<std::mutex> compiling(impl_->compiling, std::defer_lock);
  if (!compiled) {
    compiling.lock();
    compiled = impl_->find(key);
  }
  if (!compiled) {
    const auto start = std::chrono::steady_clock::now();
    try {
      compiled = impl_->compiler.CompileGrammar(convert(want, impl_->info));
    } catch (const NotEnforced& e) {
      throw ApiError{400, detail::concat(want.param, ": XGrammar would not hold the answer to all of this ",
                                         kind_name(want.kind), ": ", reason(e)), want.param, ""};
    } catch (const std::exception& e) {
      throw ApiError{400, detail::concat(want.param, ": XGrammar cannot compile this ", kind_name(want.kind), ": ",
                                         reason(e)), want.param, ""};
    }
    impl_->remember(key, *compiled, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return std::make_shared<GrammarConstraint>(*compiled, impl_->vocab, stop_ids);
}

StructuredOutputStats StructuredOutputs::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->stats;
}

#else  // without XGrammar: every request for a constraint is refused

struct StructuredOutputs::Impl {};

StructuredOutputs::StructuredOutputs(const TextTokenizer&, const TokenPieces&, int64_t, const std::vector<int32_t>&) {}

std::shared_ptr<TokenConstraint> StructuredOutputs::constrain(const OutputConstraint& want,
                                                              const std::vector<int32_t>&) {
  throw ApiError{400, kWithoutXGrammar, want.param, ""};
}

StructuredOutputStats StructuredOutputs::stats() const { return {}; }

#endif  // MINFER_HAVE_XGRAMMAR

StructuredOutputs::~StructuredOutputs() = default;

std::string StructuredOutputs::metrics_text() const {
  const StructuredOutputStats s = stats();
  std::ostringstream out;
  out.precision(9);
  out << "# HELP minfer_grammar_compiles_total Grammars compiled for structured outputs (cache misses).\n"
      << "# TYPE minfer_grammar_compiles_total counter\nminfer_grammar_compiles_total " << s.compiles << "\n"
      << "# HELP minfer_grammar_cache_hits_total Constrained requests whose grammar was compiled already.\n"
      << "# TYPE minfer_grammar_cache_hits_total counter\nminfer_grammar_cache_hits_total " << s.cache_hits << "\n"
      << "# HELP minfer_grammar_compile_seconds_total Time spent compiling grammars.\n"
      << "# TYPE minfer_grammar_compile_seconds_total counter\nminfer_grammar_compile_seconds_total "
      << s.compile_seconds << "\n";
  return out.str();
}

}  // namespace minfer::serve

#if MINFER_HAVE_XGRAMMAR
// XGrammar's log (XGRAMMAR_LOG_CUSTOMIZE): a failed check throws its message alone (no time or
// source path, which a 400 must not show); a warning is kept while a grammar is converted on this
// thread (see convert), and otherwise dropped.
namespace xgrammar {
[[noreturn]] void LogFatalImpl(const std::string& file, int lineno, const std::string& message);
void LogMessageImpl(const std::string& file, int lineno, int level, const std::string& message);

[[noreturn]] void LogFatalImpl(const std::string&, int, const std::string& message) {
  throw std::runtime_error(message);
}

void LogMessageImpl(const std::string&, int, int level, const std::string& message) {
  constexpr int kWarning = 2;  // XGRAMMAR_LOG_LEVEL_WARNING
  if (level == kWarning && minfer::serve::g_warnings != nullptr &&
      minfer::serve::g_warnings->size() < minfer::serve::kMaxWarnings)
    minfer::serve::g_warnings->push_back(message);
}
}  // namespace xgrammar
#endif
