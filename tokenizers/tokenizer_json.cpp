// load_tokenizer_json: a Hugging Face tokenizer.json as a BpeSpec (tokenizers/bpe_tokenizer.h).
//
// What is read, and what each piece means in the tokenizers library:
//   model            BPE: vocab, merges ("a b" strings or [a, b] pairs), unk_token, fuse_unk,
//                    byte_fallback, ignore_merges (dropout, a continuing-subword prefix or an
//                    end-of-word suffix are refused);
//   added_tokens     matched whole in the text (lstrip, rstrip, normalized; single_word refused);
//   normalizer       Prepend, Replace (of a string), Sequence;
//   pre_tokenizer    ByteLevel, Split (a regex or a string; any behavior; invert refused),
//                    Digits, Metaspace, Sequence;
//   post_processor   TemplateProcessing (the single-sequence template), RobertaProcessing,
//                    BertProcessing (CLS ... SEP), ByteLevel (nothing for ids), Sequence;
//   decoder          Replace, ByteFallback, Fuse, Strip (at the start), Metaspace, ByteLevel,
//                    Sequence.
// Beside it, when present: tokenizer_config.json and special_tokens_map.json name BOS and EOS;
// generation_config.json's eos_token_id adds the other tokens that end a generation.
// tokenizer_config.json's add_bos_token / add_eos_token do not change encode(): transformers 5
// encodes with the tokenizer.json's post-processor whatever they say (the llama3-bpe-eos fixture
// shows it), so minfer does the same.
#include <algorithm>
#include <climits>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "core/files.h"
#include "tokenizers/bpe_tokenizer.h"
#include "tokenizers/tokenizer_json.h"

namespace minfer {

namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxJsonBytes = uint64_t(64) << 20;
constexpr int kMaxNesting = 8;  // Sequence inside Sequence inside ...

class JsonReader {
 public:
  explicit JsonReader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void refuse(const std::string& where, const std::string& what) const {
    fail(file_, ": ", where, ": ", what);
  }
  const json& field(const json& object, const char* key, const std::string& where) const {
    expect_object(object, where);
    auto it = object.find(key);
    if (it == object.end()) refuse(where, std::string("has no \"") + key + "\"");
    return *it;
  }
  const json* optional(const json& object, const char* key) const {
    auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }
  void expect_object(const json& j, const std::string& where) const {
    if (!j.is_object()) refuse(where, std::string("must be an object, not ") + j.type_name());
  }
  std::string string(const json& object, const char* key, const std::string& where) const {
    const json& j = field(object, key, where);
    if (!j.is_string()) refuse(where + "." + key, std::string("must be a string, not ") + j.type_name());
    return j.get<std::string>();
  }
  bool boolean(const json& object, const char* key, bool fallback, const std::string& where) const {
    const json* j = optional(object, key);
    if (j == nullptr) return fallback;
    if (!j->is_boolean()) refuse(where + "." + key, std::string("must be true or false, not ") + j->type_name());
    return j->get<bool>();
  }
  int64_t integer(const json& j, const std::string& where, int64_t low, int64_t high) const {
    if (!j.is_number_integer()) refuse(where, std::string("must be an integer, not ") + j.type_name());
    const int64_t v = j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : j.get<int64_t>();
    if (v < low || v > high)
      refuse(where, "is " + std::to_string(v) + ", outside [" + std::to_string(low) + ", " + std::to_string(high) + "]");
    return v;
  }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

json parse_text(const std::string& text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail(source, ": not valid JSON: ", e.what());
  }
}

std::string read_file(const std::string& path) {
  InputFile file(path, "tokenizer");
  return file.read_all(kMaxJsonBytes);
}

json parse_file(const std::string& path) { return parse_text(read_file(path), path); }

// "Regex" or "String" pattern objects of Split, Replace.
struct Pattern {
  bool is_regex;
  std::string text;
};
Pattern read_pattern(const JsonReader& r, const json& object, const std::string& where) {
  const json& p = r.field(object, "pattern", where);
  r.expect_object(p, where + ".pattern");
  if (p.size() == 1 && p.contains("Regex")) return {true, r.string(p, "Regex", where + ".pattern")};
  if (p.size() == 1 && p.contains("String")) return {false, r.string(p, "String", where + ".pattern")};
  r.refuse(where + ".pattern", "must be {\"Regex\": ...} or {\"String\": ...}");
}

class Builder {
 public:
  Builder(const std::string& path, BpeSpec& spec) : r_(path), spec_(spec) {}

  void model(const json& m);
  void added_tokens(const json& list);
  void normalizer(const json& n, int depth);
  void pre_tokenizer(const json& p, int depth);
  void post_processor(const json& p, int depth);
  void decoder(const json& d, int depth);
  void special_tokens(const std::filesystem::path& dir);
  void chat_template_file(const std::filesystem::path& dir);
  int32_t id_of(const std::string& token, const std::string& where) const {
    auto it = ids_.find(token);
    if (it == ids_.end()) r_.refuse(where, "names '" + token + "', which is not a token");
    return it->second;
  }
  const JsonReader& reader() const { return r_; }

 private:
  std::string type_of(const json& j, const std::string& where) const { return r_.string(j, "type", where); }
  void refuse_type(const std::string& where, const std::string& type) const {
    r_.refuse(where, "type \"" + type + "\" is not supported");
  }

  JsonReader r_;
  BpeSpec& spec_;
  std::unordered_map<std::string, int32_t> ids_;  // every token's id (the vocabulary's and added)
  size_t model_tokens_ = 0;
  bool have_byte_level_ = false;
  std::vector<int32_t> template_specials_;  // TemplateProcessing's special tokens, for BOS
  std::string unk_token_;
};

void Builder::model(const json& m) {
  const std::string where = "model";
  const std::string type = type_of(m, where);
  if (type != "BPE") refuse_type(where, type);
  if (const json* dropout = r_.optional(m, "dropout"))
    if (!dropout->is_number() || dropout->get<double>() != 0.0) r_.refuse(where, "dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const json* j = r_.optional(m, key))
      if (!j->is_string() || !j->get<std::string>().empty()) r_.refuse(where, std::string(key) + " is not supported");
  spec_.fuse_unk = r_.boolean(m, "fuse_unk", false, where);
  spec_.byte_fallback = r_.boolean(m, "byte_fallback", false, where);
  spec_.ignore_merges = r_.boolean(m, "ignore_merges", false, where);
  if (const json* unk = r_.optional(m, "unk_token")) {
    if (!unk->is_string()) r_.refuse(where + ".unk_token", "must be a string");
    unk_token_ = unk->get<std::string>();
  }
  const json& vocab = r_.field(m, "vocab", where);
  r_.expect_object(vocab, "model.vocab");
  const size_t n = vocab.size();
  if (n == 0) r_.refuse("model.vocab", "is empty");
  if (n > (size_t(1) << 22)) r_.refuse("model.vocab", "holds " + std::to_string(n) + " tokens, more than 4194304");
  spec_.tokens.assign(n, std::string());
  std::vector<bool> seen(n, false);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = r_.integer(it.value(), "model.vocab[\"" + it.key() + "\"]", 0, static_cast<int64_t>(n) - 1);
    if (seen[static_cast<size_t>(id)])
      r_.refuse("model.vocab", "id " + std::to_string(id) + " is given to both '" + spec_.tokens[size_t(id)] +
                                   "' and '" + it.key() + "' (ids must be 0 .. " + std::to_string(n - 1) + ", each once)");
    seen[static_cast<size_t>(id)] = true;
    spec_.tokens[static_cast<size_t>(id)] = it.key();
    ids_[it.key()] = static_cast<int32_t>(id);
  }
  model_tokens_ = n;

  const json& merges = r_.field(m, "merges", where);
  if (!merges.is_array()) r_.refuse("model.merges", std::string("must be an array, not ") + merges.type_name());
  // Of a pair listed twice the library keeps the last rank; the engine keeps the first it sees,
  // so earlier repeats are skipped.
  std::unordered_map<uint64_t, size_t> last_rank;
  std::vector<BpeSpec::Merge> all;
  all.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& e = merges[i];
    const std::string at = "model.merges[" + std::to_string(i) + "]";
    std::string left, right;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        r_.refuse(at, "'" + s + "' is not two tokens separated by one space");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      left = e[0].get<std::string>();
      right = e[1].get<std::string>();
    } else {
      r_.refuse(at, "must be a string \"a b\" or a pair [\"a\", \"b\"]");
    }
    auto find = [&](const std::string& t) {
      auto it = ids_.find(t);
      if (it == ids_.end() || static_cast<size_t>(it->second) >= n)
        r_.refuse(at, "'" + t + "' is not in the vocabulary");
      return it->second;
    };
    const int32_t a = find(left), b = find(right), merged = find(left + right);
    all.push_back({a, b, merged});
    last_rank[(uint64_t(uint32_t(a)) << 32) | uint32_t(b)] = i;
  }
  for (size_t i = 0; i < all.size(); ++i)
    if (last_rank[(uint64_t(uint32_t(all[i].left)) << 32) | uint32_t(all[i].right)] == i) spec_.merges.push_back(all[i]);
}

void Builder::added_tokens(const json& list) {
  if (!list.is_array()) r_.refuse("added_tokens", std::string("must be an array, not ") + list.type_name());
  if (list.size() > (size_t(1) << 20)) r_.refuse("added_tokens", "holds more than 1048576 tokens");
  std::vector<AddedToken> extra;  // ids beyond the vocabulary
  for (size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    const std::string at = "added_tokens[" + std::to_string(i) + "]";
    AddedToken a;
    a.id = static_cast<int32_t>(r_.integer(r_.field(t, "id", at), at + ".id", 0, (int64_t(1) << 22) - 1));
    a.content = r_.string(t, "content", at);
    if (a.content.empty()) r_.refuse(at, "content is empty");
    a.special = r_.boolean(t, "special", false, at);
    a.lstrip = r_.boolean(t, "lstrip", false, at);
    a.rstrip = r_.boolean(t, "rstrip", false, at);
    a.normalized = r_.boolean(t, "normalized", !a.special, at);
    if (r_.boolean(t, "single_word", false, at)) r_.refuse(at, "single_word is not supported");
    auto known = ids_.find(a.content);
    if (static_cast<size_t>(a.id) < model_tokens_) {
      if (spec_.tokens[static_cast<size_t>(a.id)] != a.content)
        r_.refuse(at, "'" + a.content + "' has id " + std::to_string(a.id) + ", which the vocabulary gives to '" +
                          spec_.tokens[static_cast<size_t>(a.id)] + "'");
    } else if (known != ids_.end() && known->second != a.id) {
      r_.refuse(at, "'" + a.content + "' has id " + std::to_string(a.id) + " and also id " + std::to_string(known->second));
    } else {
      extra.push_back(a);
    }
    ids_[a.content] = a.id;
    spec_.added.push_back(a);
  }
  // Ids past the vocabulary must continue it without gaps (checked before anything is allocated
  // for them: a count of ids cannot exceed the number of tokens listed).
  size_t total = model_tokens_;
  for (const AddedToken& a : extra) total = std::max(total, static_cast<size_t>(a.id) + 1);
  if (total - model_tokens_ > extra.size())
    r_.refuse("added_tokens", "ids reach " + std::to_string(total - 1) + " but only " + std::to_string(extra.size()) +
                                  " tokens follow the vocabulary's " + std::to_string(model_tokens_) +
                                  " (ids must be 0 .. N-1, each once)");
  spec_.tokens.resize(total);
  std::vector<bool> filled(total, false);
  for (size_t i = 0; i < model_tokens_; ++i) filled[i] = true;
  for (const AddedToken& a : extra) {
    if (filled[static_cast<size_t>(a.id)] && spec_.tokens[static_cast<size_t>(a.id)] != a.content)
      r_.refuse("added_tokens", "id " + std::to_string(a.id) + " is given to two tokens");
    filled[static_cast<size_t>(a.id)] = true;
    spec_.tokens[static_cast<size_t>(a.id)] = a.content;
  }
  for (size_t i = 0; i < total; ++i)
    if (!filled[i]) r_.refuse("added_tokens", "no token has id " + std::to_string(i) + " (ids must be 0 .. " +
                                                  std::to_string(total - 1) + ", each once)");
  if (!unk_token_.empty()) spec_.unk_id = id_of(unk_token_, "model.unk_token");
}

void Builder::normalizer(const json& n, int depth) {
  const std::string where = "normalizer";
  if (depth > kMaxNesting) r_.refuse(where, "Sequences are nested too deeply");
  const std::string type = type_of(n, where);
  if (type == "Sequence") {
    const json& list = r_.field(n, "normalizers", where);
    if (!list.is_array()) r_.refuse(where + ".normalizers", "must be an array");
    for (const json& item : list) normalizer(item, depth + 1);
  } else if (type == "Prepend") {
    spec_.normalizer.push_back({NormalizeStep::Kind::prepend, r_.string(n, "prepend", where), ""});
  } else if (type == "Replace") {
    const Pattern p = read_pattern(r_, n, where);
    if (p.is_regex) r_.refuse(where, "Replace with a Regex pattern is not supported");
    if (p.text.empty()) r_.refuse(where, "Replace of an empty string is not supported");
    spec_.normalizer.push_back({NormalizeStep::Kind::replace, p.text, r_.string(n, "content", where)});
  } else {
    refuse_type(where, type);
  }
}

SplitBehavior read_behavior(const JsonReader& r, const json& p, const std::string& where) {
  const std::string b = r.string(p, "behavior", where);
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  r.refuse(where + ".behavior", "\"" + b + "\" is not a split behavior");
}

PreTokenizeStep::Prepend read_prepend_scheme(const JsonReader& r, const json& p, const std::string& where) {
  if (const json* scheme = r.optional(p, "prepend_scheme")) {
    const std::string s = scheme->is_string() ? scheme->get<std::string>() : "";
    if (s == "always") return PreTokenizeStep::Prepend::always;
    if (s == "first") return PreTokenizeStep::Prepend::first;
    if (s == "never") return PreTokenizeStep::Prepend::never;
    r.refuse(where + ".prepend_scheme", "must be \"always\", \"first\" or \"never\"");
  }
  // Files older than prepend_scheme say add_prefix_space instead.
  return r.boolean(p, "add_prefix_space", true, where) ? PreTokenizeStep::Prepend::always
                                                        : PreTokenizeStep::Prepend::never;
}

void Builder::pre_tokenizer(const json& p, int depth) {
  const std::string where = "pre_tokenizer";
  if (depth > kMaxNesting) r_.refuse(where, "Sequences are nested too deeply");
  if (have_byte_level_) r_.refuse(where, "a ByteLevel pre-tokenizer must come last");
  const std::string type = type_of(p, where);
  PreTokenizeStep step;
  if (type == "Sequence") {
    const json& list = r_.field(p, "pretokenizers", where);
    if (!list.is_array()) r_.refuse(where + ".pretokenizers", "must be an array");
    for (const json& item : list) pre_tokenizer(item, depth + 1);
    return;
  } else if (type == "Split") {
    if (r_.boolean(p, "invert", false, where)) r_.refuse(where, "Split with invert is not supported");
    const Pattern pattern = read_pattern(r_, p, where);
    step.kind = PreTokenizeStep::Kind::split;
    if (pattern.is_regex) step.regex = std::make_shared<Regex>(pattern.text, r_.file() + ": " + where + " Split");
    else step.literal = pattern.text;
    step.behavior = read_behavior(r_, p, where);
  } else if (type == "Digits") {
    step.kind = PreTokenizeStep::Kind::split;
    // Rust's char::is_numeric is the Unicode N categories, as \p{N}.
    step.regex = std::make_shared<Regex>(r_.boolean(p, "individual_digits", false, where) ? "\\p{N}" : "\\p{N}+",
                                         r_.file() + ": " + where + " Digits");
  } else if (type == "ByteLevel") {
    step.kind = PreTokenizeStep::Kind::byte_level;
    step.add_prefix_space = r_.boolean(p, "add_prefix_space", true, where);
    if (r_.boolean(p, "use_regex", true, where))
      step.regex = std::make_shared<Regex>(kGpt2Pattern, r_.file() + ": " + where + " ByteLevel");
    have_byte_level_ = true;
    spec_.byte_level = true;
  } else if (type == "Metaspace") {
    step.kind = PreTokenizeStep::Kind::metaspace;
    step.replacement = r_.string(p, "replacement", where);
    if (step.replacement.empty()) r_.refuse(where + ".replacement", "is empty");
    step.prepend = read_prepend_scheme(r_, p, where);
    step.split = r_.boolean(p, "split", true, where);
  } else {
    refuse_type(where, type);
  }
  spec_.pre_tokenizer.push_back(std::move(step));
}

void Builder::post_processor(const json& p, int depth) {
  const std::string where = "post_processor";
  if (depth > kMaxNesting) r_.refuse(where, "Sequences are nested too deeply");
  const std::string type = type_of(p, where);
  if (type == "Sequence") {
    const json& list = r_.field(p, "processors", where);
    if (!list.is_array()) r_.refuse(where + ".processors", "must be an array");
    for (const json& item : list) post_processor(item, depth + 1);
  } else if (type == "ByteLevel") {
    // Offsets only.
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto token = [&](const char* key) {
      const json& pair = r_.field(p, key, where);
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string())
        r_.refuse(where + "." + key, "must be [\"token\", id]");
      const int32_t id = static_cast<int32_t>(r_.integer(pair[1], where + "." + key, 0, INT32_MAX));
      if (id_of(pair[0].get<std::string>(), where + "." + key) != id)
        r_.refuse(where + "." + key, "names '" + pair[0].get<std::string>() + "' with the wrong id");
      return id;
    };
    const int32_t cls = token("cls"), sep = token("sep");
    spec_.prefix.insert(spec_.prefix.begin(), cls);
    spec_.suffix.push_back(sep);
    template_specials_.push_back(cls);
  } else if (type == "TemplateProcessing") {
    const json& single = r_.field(p, "single", where);
    const json& specials = r_.field(p, "special_tokens", where);
    r_.expect_object(specials, where + ".special_tokens");
    if (!single.is_array()) r_.refuse(where + ".single", "must be an array");
    std::vector<int32_t> before, after;
    bool seen_sequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const std::string at = where + ".single[" + std::to_string(i) + "]";
      const json& item = single[i];
      r_.expect_object(item, at);
      if (item.contains("Sequence")) {
        const std::string id = r_.string(item["Sequence"], "id", at + ".Sequence");
        if (id != "A" || seen_sequence) r_.refuse(at, "a single-sequence template holds $A once");
        seen_sequence = true;
      } else if (item.contains("SpecialToken")) {
        const std::string name = r_.string(item["SpecialToken"], "id", at + ".SpecialToken");
        const json& entry = r_.field(specials, name.c_str(), where + ".special_tokens");
        const json& ids = r_.field(entry, "ids", where + ".special_tokens." + name);
        if (!ids.is_array() || ids.empty() || ids.size() > 64)
          r_.refuse(where + ".special_tokens." + name + ".ids", "must be an array of 1 to 64 ids");
        for (const json& id : ids) {
          const auto v = static_cast<int32_t>(r_.integer(id, where + ".special_tokens." + name + ".ids", 0, INT32_MAX));
          (seen_sequence ? after : before).push_back(v);
          template_specials_.push_back(v);
        }
      } else {
        r_.refuse(at, "must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (!seen_sequence) r_.refuse(where + ".single", "has no $A");
    spec_.prefix.insert(spec_.prefix.begin(), before.begin(), before.end());
    spec_.suffix.insert(spec_.suffix.end(), after.begin(), after.end());
  } else {
    refuse_type(where, type);
  }
}

void Builder::decoder(const json& d, int depth) {
  const std::string where = "decoder";
  if (depth > kMaxNesting) r_.refuse(where, "Sequences are nested too deeply");
  const std::string type = type_of(d, where);
  DecodeStep step;
  if (type == "Sequence") {
    const json& list = r_.field(d, "decoders", where);
    if (!list.is_array()) r_.refuse(where + ".decoders", "must be an array");
    for (const json& item : list) decoder(item, depth + 1);
    return;
  } else if (type == "Replace") {
    const Pattern p = read_pattern(r_, d, where);
    if (p.is_regex) r_.refuse(where, "Replace with a Regex pattern is not supported");
    step.kind = DecodeStep::Kind::replace;
    step.from = p.text;
    step.to = r_.string(d, "content", where);
  } else if (type == "ByteFallback") {
    step.kind = DecodeStep::Kind::byte_fallback;
  } else if (type == "Fuse") {
    step.kind = DecodeStep::Kind::fuse;
  } else if (type == "Strip") {
    step.kind = DecodeStep::Kind::strip;
    step.from = r_.string(d, "content", where);
    step.strip_start = static_cast<size_t>(r_.integer(r_.field(d, "start", where), where + ".start", 0, 1 << 20));
    if (r_.integer(r_.field(d, "stop", where), where + ".stop", 0, 1 << 20) != 0)
      r_.refuse(where, "Strip at the end (stop > 0) is not supported");
  } else if (type == "Metaspace") {
    step.kind = DecodeStep::Kind::metaspace;
    step.replacement = r_.string(d, "replacement", where);
    step.metaspace_prepends = read_prepend_scheme(r_, d, where) != PreTokenizeStep::Prepend::never;
  } else if (type == "ByteLevel") {
    step.kind = DecodeStep::Kind::byte_level;
  } else {
    refuse_type(where, type);
  }
  spec_.decoder.push_back(std::move(step));
}

// A token as tokenizer_config.json or special_tokens_map.json write it: "text" or {"content": "text"}.
const json* token_text(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return nullptr;
  if (it->is_string()) return &*it;
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return &*content;
  }
  return nullptr;
}

// tokenizer_config.json's chat_template: the text, or a list of {"name", "template"} of which the
// one named "default" (else the first) counts, as transformers picks it.
std::string chat_template_of(const json& config, const JsonReader& r) {
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array() || it->empty()) r.refuse("chat_template", "must be a string or a list of {name, template}");
  const json* chosen = nullptr;
  for (const json& entry : *it) {
    r.expect_object(entry, "chat_template[]");
    if (chosen == nullptr || r.string(entry, "name", "chat_template[]") == "default") chosen = &entry;
  }
  return r.string(*chosen, "template", "chat_template[]");
}

// Newer transformers write the template to chat_template.jinja beside tokenizer_config.json; it
// takes precedence, as there.
void Builder::chat_template_file(const std::filesystem::path& dir) {
  if (dir.empty()) return;
  const std::filesystem::path path = dir / "chat_template.jinja";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return;
  spec_.chat_template = read_file(path.string());
  spec_.chat_template_error.clear();
}

void Builder::special_tokens(const std::filesystem::path& dir) {
  std::string bos, eos;
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    if (dir.empty()) break;
    const std::filesystem::path path = dir / name;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;
    const json config = parse_file(path.string());
    JsonReader r(path.string());
    r.expect_object(config, "the top level");
    for (const char* key : {"add_bos_token", "add_eos_token"}) r.boolean(config, key, false, "the top level");
    const json* b = token_text(config, "bos_token");
    const json* e = token_text(config, "eos_token");
    if (bos.empty() && b) bos = b->get<std::string>();
    if (eos.empty() && e) eos = e->get<std::string>();
    if (spec_.chat_template.empty() && spec_.chat_template_error.empty()) {
      try {
        spec_.chat_template = chat_template_of(config, r);
      } catch (const Error& malformed) {  // costs the chat, not the tokenizer (BpeSpec::chat_template_error)
        spec_.chat_template_error = malformed.what();
      }
    }
  }
  chat_template_file(dir);
  if (!bos.empty()) {
    auto it = ids_.find(bos);
    if (it == ids_.end()) fail(r_.file(), ": the BOS token '", bos, "' of tokenizer_config.json is not a token");
    spec_.bos = it->second;
  } else if (!template_specials_.empty()) {
    spec_.bos = template_specials_.front();
  }
  if (!eos.empty()) {
    auto it = ids_.find(eos);
    if (it == ids_.end()) fail(r_.file(), ": the EOS token '", eos, "' of tokenizer_config.json is not a token");
    spec_.eos.push_back(it->second);
  }
  const std::filesystem::path generation = dir / "generation_config.json";
  std::error_code ec;
  if (!dir.empty() && std::filesystem::exists(generation, ec)) {
    const json config = parse_file(generation.string());
    JsonReader r(generation.string());
    r.expect_object(config, "the top level");
    if (const json* ids = r.optional(config, "eos_token_id")) {
      const int64_t last = static_cast<int64_t>(spec_.tokens.size()) - 1;
      std::vector<int32_t> listed;
      if (ids->is_array()) {
        for (const json& id : *ids) listed.push_back(static_cast<int32_t>(r.integer(id, "eos_token_id", 0, last)));
      } else {
        listed.push_back(static_cast<int32_t>(r.integer(*ids, "eos_token_id", 0, last)));
      }
      for (int32_t id : listed)
        if (std::find(spec_.eos.begin(), spec_.eos.end(), id) == spec_.eos.end()) spec_.eos.push_back(id);
    }
  }
  if (spec_.eos.empty()) {
    // No configuration: the usual names of the end-of-text token.
    for (const char* name : {"</s>", "<|endoftext|>", "<|end_of_text|>", "<|im_end|>", "<eos>"}) {
      auto it = ids_.find(name);
      if (it != ids_.end()) {
        spec_.eos.push_back(it->second);
        break;
      }
    }
  }
}

}  // namespace

std::unique_ptr<TextTokenizer> load_tokenizer_json(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return parse_tokenizer_json(read_file(path), path, dir.empty() ? "." : dir);
}

std::unique_ptr<TextTokenizer> parse_tokenizer_json(const std::string& text, const std::string& path,
                                                    const std::string& config_dir) {
  if (text.size() > kMaxJsonBytes) fail(path, ": ", text.size(), " bytes exceed the limit of ", kMaxJsonBytes);
  const json root = parse_text(text, path);
  BpeSpec spec;
  spec.source = path;
  Builder b(path, spec);
  const JsonReader& r = b.reader();
  try {
    r.expect_object(root, "the top level");
    for (const char* key : {"truncation", "padding"})
      if (r.optional(root, key)) r.refuse(key, "is set; minfer encodes without truncation or padding");
    b.model(r.field(root, "model", "the top level"));
    if (const json* added = r.optional(root, "added_tokens")) b.added_tokens(*added);
    else b.added_tokens(json::array());
    if (const json* n = r.optional(root, "normalizer")) b.normalizer(*n, 0);
    if (const json* p = r.optional(root, "pre_tokenizer")) b.pre_tokenizer(*p, 0);
    if (const json* p = r.optional(root, "post_processor")) b.post_processor(*p, 0);
    if (const json* d = r.optional(root, "decoder")) b.decoder(*d, 0);
    else spec.has_decoder = false;
    b.special_tokens(config_dir);
  } catch (const json::exception& e) {
    fail(path, ": unexpected JSON content: ", e.what());
  }
  spec.unknown = UnknownChars::unk_or_drop;
  spec.rule = MergeRule::ranked;
  const char* kind = spec.byte_level ? "byte-level BPE" : spec.byte_fallback ? "SentencePiece-style BPE" : "BPE";
  spec.description = std::string(kind) + " (tokenizer.json), " + std::to_string(spec.tokens.size()) + " tokens, " +
                     std::to_string(spec.merges.size()) + " merges";
  return make_bpe_tokenizer(std::move(spec));
}

}  // namespace minfer
