// Malformed tokenizer.json files and GGUF vocabularies: each is refused with one line that names
// the file and the problem, never a crash or a silently different tokenizer.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/error.h"
#include "tokenizers/text_tokenizer.h"
#include "test_support.h"

namespace minfer {
namespace {

using json = nlohmann::json;

// A small valid byte-level tokenizer.json: "a" + "b" merge into "ab".
json valid_tokenizer() {
  return json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 0, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": false, "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                       "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}},
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"<s>": 0, "a": 1, "b": 2, "ab": 3}, "merges": ["a b"]}
  })");
}

void write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// Loading `text` as tokenizer.json must throw Error: one line, naming the file and `fragment`.
void expect_refused(const std::string& text, const std::string& fragment, const std::string& config = "") {
  test::ScratchDir dir("tokenizer-json");
  const std::string path = dir.file("tokenizer.json");
  write(path, text);
  if (!config.empty()) write(dir.file("tokenizer_config.json"), config);
  try {
    load_tokenizer_json(path);
    ADD_FAILURE() << "accepted; expected an error with '" << fragment << "'";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
    EXPECT_NE(message.find("tokenizer"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

void expect_refused(const std::function<void(json&)>& change, const std::string& fragment) {
  json j = valid_tokenizer();
  change(j);
  SCOPED_TRACE(fragment);
  expect_refused(j.dump(), fragment);
}

TEST(TokenizerJsonErrors, TheValidBaseLoads) {
  test::ScratchDir dir("tokenizer-json");
  write(dir.file("tokenizer.json"), valid_tokenizer().dump());
  const auto t = load_tokenizer_json(dir.file("tokenizer.json"));
  EXPECT_EQ(t->encode("ab", true), (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(t->decode({3, 1}), "aba");
}

TEST(TokenizerJsonErrors, BrokenFiles) {
  const std::string text = valid_tokenizer().dump();
  expect_refused(text.substr(0, text.size() / 2), "not valid JSON");
  expect_refused("{", "not valid JSON");
  expect_refused("", "not valid JSON");
  expect_refused("\xFF\xFE{}", "not valid JSON");
  expect_refused("[]", "must be an object");
  expect_refused("{\"model\": 1}", "must be an object");
  expect_refused(text, "not valid JSON", "{\"bos_token\": ");
  expect_refused(text, "'<x>' of tokenizer_config.json is not a token", R"({"bos_token": "<x>"})");
  expect_refused(text, "must be true or false", R"({"add_bos_token": "yes"})");
}

// A malformed chat_template in tokenizer_config.json costs the chat, not the tokenizer: it loads and
// encodes, and chat_template() (ChatFormat, minfer chat, serve's chat route) refuses with one line.
TEST(TokenizerJsonErrors, AMalformedChatTemplateRefusesOnlyTheChat) {
  for (const std::string& config : {std::string(R"({"chat_template": 5})"), std::string(R"({"chat_template": []})"),
                                    std::string(R"({"chat_template": [{"name": "default"}]})")}) {
    SCOPED_TRACE(config);
    test::ScratchDir dir("tokenizer-json");
    write(dir.file("tokenizer.json"), valid_tokenizer().dump());
    write(dir.file("tokenizer_config.json"), config);
    const auto t = load_tokenizer_json(dir.file("tokenizer.json"));
    EXPECT_EQ(t->encode("ab", true), (std::vector<int32_t>{0, 3}));
    try {
      t->chat_template();
      ADD_FAILURE() << "a malformed chat_template was accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("chat_template"), std::string::npos) << message;
      EXPECT_NE(message.find("tokenizer_config.json"), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
    // chat_template.jinja beside it takes precedence, as in transformers: then the chat works.
    write(dir.file("chat_template.jinja"), "{{ messages }}");
    EXPECT_EQ(load_tokenizer_json(dir.file("tokenizer.json"))->chat_template(), "{{ messages }}");
  }
}

TEST(TokenizerJsonErrors, FilesThatAreNotTokenizers) {
  test::ScratchDir dir("tokenizer-json");
  EXPECT_THROW(load_tokenizer_json(dir.file("absent.json")), Error);
  EXPECT_THROW(load_tokenizer_json(dir.path()), Error);  // a directory
  const std::string big = dir.file("big.json");
  write(big, "{}");
  ASSERT_EQ(::truncate(big.c_str(), (64 << 20) + 1), 0);  // sparse: no 64 MiB written
  try {
    load_tokenizer_json(big);
    ADD_FAILURE() << "a file over 64 MiB was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceed the limit"), std::string::npos) << e.what();
  }
}

TEST(TokenizerJsonErrors, Model) {
  expect_refused([](json& j) { j.erase("model"); }, "has no \"model\"");
  expect_refused([](json& j) { j["model"]["type"] = "WordPiece"; }, "type \"WordPiece\" is not supported");
  expect_refused([](json& j) { j["model"]["type"] = "Unigram"; }, "type \"Unigram\" is not supported");
  expect_refused([](json& j) { j["model"]["type"] = 7; }, "must be a string");
  expect_refused([](json& j) { j["model"]["dropout"] = 0.1; }, "dropout is not supported");
  expect_refused([](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, "continuing_subword_prefix");
  expect_refused([](json& j) { j["model"]["end_of_word_suffix"] = "</w>"; }, "end_of_word_suffix");
  expect_refused([](json& j) { j["model"]["byte_fallback"] = "yes"; }, "must be true or false");
  expect_refused([](json& j) { j["model"]["unk_token"] = "<missing>"; }, "'<missing>', which is not a token");
  expect_refused([](json& j) { j["truncation"] = json{{"max_length", 8}}; }, "truncation");
  expect_refused([](json& j) { j["padding"] = json{{"length", 8}}; }, "padding");
}

TEST(TokenizerJsonErrors, Vocabulary) {
  expect_refused([](json& j) { j["model"]["vocab"] = json::array({"a", "b"}); }, "must be an object");
  expect_refused([](json& j) { j["model"]["vocab"] = json::object(); }, "is empty");
  expect_refused([](json& j) { j["model"]["vocab"]["b"] = 1; }, "is given to both");
  expect_refused([](json& j) { j["model"]["vocab"]["b"] = 1000000000000LL; }, "outside [0, 3]");
  expect_refused([](json& j) { j["model"]["vocab"]["b"] = -1; }, "outside [0, 3]");
  expect_refused([](json& j) { j["model"]["vocab"]["b"] = "2"; }, "must be an integer");
  expect_refused([](json& j) { j["model"]["vocab"]["b"] = 2.5; }, "must be an integer");
  expect_refused([](json& j) { j["model"]["vocab"]["b"] = 18446744073709551615ULL; }, "outside [0, 3]");
}

TEST(TokenizerJsonErrors, Merges) {
  expect_refused([](json& j) { j["model"]["merges"] = json::object(); }, "must be an array");
  expect_refused([](json& j) { j["model"]["merges"] = {"a c"}; }, "'c' is not in the vocabulary");
  expect_refused([](json& j) { j["model"]["merges"] = {"b a"}; }, "'ba' is not in the vocabulary");
  expect_refused([](json& j) { j["model"]["merges"] = {"ab"}; }, "is not two tokens");
  expect_refused([](json& j) { j["model"]["merges"] = {"a b c"}; }, "is not two tokens");
  expect_refused([](json& j) { j["model"]["merges"] = json::array({json::array({1, 2})}); }, "must be a string");
  expect_refused([](json& j) { j["model"]["merges"] = json::array({json::array({"a"})}); }, "must be a string");
  expect_refused([](json& j) { j["model"]["merges"] = json::array({json::array({"a", "x"})}); }, "'x' is not in");
}

TEST(TokenizerJsonErrors, AddedTokens) {
  auto token = [](int64_t id, const std::string& content) {
    return json{{"id", id}, {"content", content}, {"special", true}, {"normalized", false}};
  };
  expect_refused([](json& j) { j["added_tokens"] = json::object(); }, "must be an array");
  expect_refused([&](json& j) { j["added_tokens"].push_back(token(10, "<x>")); }, "ids reach 10 but only 1 tokens follow");
  expect_refused([&](json& j) {
    j["added_tokens"].push_back(token(5, "<x>"));
    j["added_tokens"].push_back(token(5, "<x>"));
  }, "no token has id 4");
  expect_refused([&](json& j) { j["added_tokens"].push_back(token(1, "<x>")); }, "which the vocabulary gives to 'a'");
  expect_refused([&](json& j) { j["added_tokens"].push_back(token(4, "a")); }, "and also id 1");
  expect_refused([&](json& j) { j["added_tokens"].push_back(token(4000000000LL, "<x>")); }, "outside");
  expect_refused([&](json& j) { j["added_tokens"].push_back(token(4, "")); }, "content is empty");
  expect_refused([&](json& j) {
    j["added_tokens"].push_back(token(4, "<x>"));
    j["added_tokens"].push_back(token(4, "<y>"));
  }, "id 4 is given to two tokens");
  expect_refused([&](json& j) {
    json t = token(4, "<x>");
    t["single_word"] = true;
    j["added_tokens"].push_back(t);
  }, "single_word is not supported");
  expect_refused([&](json& j) { j["added_tokens"][0]["id"] = "0"; }, "must be an integer");
}

TEST(TokenizerJsonErrors, Pipeline) {
  expect_refused([](json& j) { j["normalizer"] = {{"type", "NFKC"}}; }, "type \"NFKC\" is not supported");
  expect_refused([](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }, "type \"Lowercase\" is not supported");
  expect_refused([](json& j) {
    j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", " "}};
  }, "Replace with a Regex pattern is not supported");
  expect_refused([](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "type \"Whitespace\" is not supported");
  expect_refused([](json& j) { j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}}; }, "\"BertPreTokenizer\" is not supported");
  expect_refused([](json& j) {
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Isolated"}, {"invert", true}};
  }, "invert is not supported");
  expect_refused([](json& j) {
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  }, "regular expression is not supported");
  expect_refused([](json& j) {
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}};
  }, "\"Sideways\" is not a split behavior");
  expect_refused([](json& j) {
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Glob", "a"}}}, {"behavior", "Isolated"}};
  }, "must be {\"Regex\"");
  expect_refused([](json& j) {
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", {{{"type", "ByteLevel"}}, {{"type", "Digits"}}}}};
  }, "must come last");
  expect_refused([](json& j) {
    json nested = {{"type", "Digits"}};
    for (int i = 0; i < 12; ++i) nested = {{"type", "Sequence"}, {"pretokenizers", json::array({nested})}};
    j["pre_tokenizer"] = nested;
  }, "nested too deeply");
  expect_refused([](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", ""}}; }, "is empty");
  expect_refused([](json& j) {
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "sometimes"}};
  }, "prepend_scheme");
  expect_refused([](json& j) { j["post_processor"] = {{"type", "Mystery"}}; }, "type \"Mystery\" is not supported");
  expect_refused([](json& j) { j["post_processor"]["single"].erase(1); }, "has no $A");
  expect_refused([](json& j) { j["post_processor"]["single"][0]["SpecialToken"]["id"] = "<x>"; }, "has no \"<x>\"");
  expect_refused([](json& j) { j["post_processor"]["special_tokens"]["<s>"]["ids"] = {99}; }, "outside");
  expect_refused([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "type \"WordPiece\" is not supported");
  expect_refused([](json& j) {
    j["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", 0}, {"stop", 1}};
  }, "stop > 0");
}

TEST(TokenizerJsonErrors, PostProcessorIdOutsideTheVocabularyIsRefused) {
  json j = valid_tokenizer();
  j["post_processor"]["special_tokens"]["<s>"]["ids"] = {4};
  expect_refused(j.dump(), "token id 4 outside [0, 4)");
}

GgufVocab small_gguf(const std::string& model) {
  GgufVocab v;
  v.model = model;
  v.pre = "gpt-2";
  v.tokens = {"<s>", "a", "b", "ab"};
  v.scores = {0, -1, -2, -0.5f};
  v.token_types = {3, 1, 1, 1};
  v.merges = {"a b"};
  v.bos_id = 0;
  v.add_space_prefix = false;
  return v;
}

void expect_gguf_refused(const GgufVocab& v, const std::string& fragment) {
  try {
    make_gguf_tokenizer(v, "model.gguf");
    ADD_FAILURE() << "accepted; expected an error with '" << fragment << "'";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
    EXPECT_NE(message.find("model.gguf"), std::string::npos) << message;
  }
}

TEST(GgufTokenizerErrors, RefusedWithOneLine) {
  EXPECT_EQ(make_gguf_tokenizer(small_gguf("gpt2"), "model.gguf")->encode("ab", true), (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(make_gguf_tokenizer(small_gguf("llama"), "model.gguf")->encode("ab", false), (std::vector<int32_t>{3}));
  auto with = [](const std::string& model, const std::function<void(GgufVocab&)>& change) {
    GgufVocab v = small_gguf(model);
    change(v);
    return v;
  };
  expect_gguf_refused(with("bert", [](GgufVocab&) {}), "tokenizer.ggml.model = 'bert' is not supported");
  expect_gguf_refused(with("gpt2", [](GgufVocab& v) { v.pre = "deepseek-llm"; }),
                      "tokenizer.ggml.pre = 'deepseek-llm' is not supported");
  expect_gguf_refused(with("gpt2", [](GgufVocab& v) { v.merges = {"a c"}; }), "names 'c', which is not a token");
  expect_gguf_refused(with("gpt2", [](GgufVocab& v) { v.merges = {"b a"}; }), "names 'ba'");
  expect_gguf_refused(with("gpt2", [](GgufVocab& v) { v.merges = {"ab"}; }), "is not two tokens");
  expect_gguf_refused(with("llama", [](GgufVocab& v) { v.scores.pop_back(); }), "tokenizer.ggml.scores has 3 entries");
  expect_gguf_refused(with("llama", [](GgufVocab& v) { v.token_types = {1, 1}; }), "token_type has 2 entries");
  expect_gguf_refused(with("llama", [](GgufVocab& v) { v.token_types[1] = 9; }), "has type 9");
  expect_gguf_refused(with("llama", [](GgufVocab& v) { v.bos_id = 4; }), "bos_token_id = 4 is outside");
  expect_gguf_refused(with("llama", [](GgufVocab& v) { v.eot_ids = {-5}; }), "eot_token_id = -5");
  expect_gguf_refused(with("llama", [](GgufVocab& v) { v.bos_id = -1; }), "add_bos_token is true but there is no BOS");
  expect_gguf_refused(with("llama", [](GgufVocab& v) { v.tokens.clear(); }), "tokenizer.ggml.tokens is empty");
  expect_gguf_refused(with("llama", [](GgufVocab& v) { v.tokens[0] = ""; }), "is empty");
  // A character with neither a token nor a byte piece: refused when met, with its byte.
  try {
    make_gguf_tokenizer(small_gguf("llama"), "model.gguf")->encode("abc", false);
    ADD_FAILURE() << "encoded a character the vocabulary cannot express";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no token"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace minfer
