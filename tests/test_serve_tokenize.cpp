// `minfer serve`'s POST /tokenize and POST /detokenize (llama-server's shape), against a real server
// process with the chat fixture (tests/data/models/smollm-chat: SmolLM's tokenizer, whose
// <|im_start|> is special): the ids are the tokenizer's, with add_special and parse_special as
// llama-server takes them; pieces add up to the text, a piece that is not valid UTF-8 as its bytes;
// detokenize gives the text back; the bounds hold at the limit and refuse one past it; the API key
// guards both routes; a model without a tokenizer says so. The encoding itself:
// test_text_tokenizer.cpp (encode_plain).
#include <gtest/gtest.h>

#include <algorithm>

#include "formats/model_files.h"
#include "tests/serve_http_support.h"
#include "tests/test_support.h"

namespace minfer::test {
namespace {

#if MINFER_HAVE_HTTPLIB

const std::string kChatModel = MINFER_SOURCE_DIR "/tests/data/models/smollm-chat";
constexpr int64_t kMaxPromptTokens = 40, kMaxTokensLimit = 24;

class ServeTokenize : public SharedServer<ServeTokenize> {
 public:
  static std::vector<std::string> server_args() {
    return {"-m", kChatModel, "--slots", "1", "--ctx", "128", "--max-prompt-tokens", std::to_string(kMaxPromptTokens),
            "--max-tokens-limit", std::to_string(kMaxTokensLimit)};
  }
  static const TextTokenizer& tokenizer() {
    static const std::unique_ptr<TextTokenizer> t = load_model_tokenizer(kChatModel);
    return *t;
  }
};

Answer tokenize(int port, const json& body) { return post(port, body.dump(), "/tokenize"); }
Answer detokenize(int port, const json& body) { return post(port, body.dump(), "/detokenize"); }

TEST_F(ServeTokenize, IdsAreTheTokenizersWithAddSpecialAndParseSpecialAsLlamaServerTakesThem) {
  const std::string text = "<|im_start|>user\nhello there<|im_end|>";
  Answer a = tokenize(port(), {{"content", text}});
  ASSERT_EQ(a.status, 200) << a.raw;
  const std::vector<int32_t> parsed = tokenizer().encode(text, false);  // llama-server's defaults
  EXPECT_EQ(ids_of(a.body["tokens"]), parsed);
  EXPECT_EQ(std::count(parsed.begin(), parsed.end(), 1), 1) << "the fixture's <|im_start|> must be special";

  Answer plain = tokenize(port(), {{"content", text}, {"parse_special", false}});
  ASSERT_EQ(plain.status, 200) << plain.raw;
  const std::vector<int32_t> ids = ids_of(plain.body["tokens"]);
  EXPECT_EQ(ids, tokenizer().encode_plain(text, false));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 0);
  EXPECT_GT(ids.size(), parsed.size());

  Answer special = tokenize(port(), {{"content", "hi"}, {"add_special", true}, {"parse_special", true}});
  ASSERT_EQ(special.status, 200) << special.raw;
  EXPECT_EQ(ids_of(special.body["tokens"]), tokenizer().encode("hi", true));
}

// Each piece is the bytes its token adds; the emoji's bytes come in tokens that are not whole
// characters, written as lists of byte values. Together they are the text, and detokenize gives
// it back.
TEST_F(ServeTokenize, PiecesAddUpToTheTextAndDetokenizeGivesItBack) {
  const std::string text = "hi \xF0\x9F\xA4\x97 <|im_start|>";
  Answer a = tokenize(port(), {{"content", text}, {"with_pieces", true}});
  ASSERT_EQ(a.status, 200) << a.raw;
  std::string joined;
  std::vector<int32_t> ids;
  int byte_lists = 0;
  for (const json& t : a.body["tokens"]) {
    ids.push_back(t["id"].get<int32_t>());
    if (t["piece"].is_string()) {
      joined += t["piece"].get<std::string>();
      continue;
    }
    ++byte_lists;
    for (const json& b : t["piece"]) joined += static_cast<char>(b.get<int>());
  }
  EXPECT_EQ(joined, text);
  EXPECT_EQ(ids, tokenizer().encode(text, false));
  EXPECT_GT(byte_lists, 0) << "the fixture splits the emoji into tokens of partial characters: " << a.raw;

  Answer back = detokenize(port(), {{"tokens", ids}});
  ASSERT_EQ(back.status, 200) << back.raw;
  EXPECT_EQ(back.body["content"], text);
  Answer none = detokenize(port(), {{"tokens", json::array()}});
  ASSERT_EQ(none.status, 200) << none.raw;
  EXPECT_EQ(none.body["content"], "");
}

// A content of exactly --max-prompt-tokens tokens is tokenized, one more token is refused; a list
// of --max-prompt-tokens + --max-tokens-limit ids is decoded, one more is refused; ids at the
// vocabulary's edge.
TEST_F(ServeTokenize, BoundsHoldAtTheLimitAndRefuseOnePast) {
  std::string at_limit;
  for (int64_t i = 0; i < kMaxPromptTokens; ++i) at_limit += " hello";
  ASSERT_EQ(static_cast<int64_t>(tokenizer().encode(at_limit, false).size()), kMaxPromptTokens);
  Answer a = tokenize(port(), {{"content", at_limit}});
  ASSERT_EQ(a.status, 200) << a.raw;
  EXPECT_EQ(static_cast<int64_t>(a.body["tokens"].size()), kMaxPromptTokens);
  expect_api_error(tokenize(port(), {{"content", at_limit + " hello"}}), 400, "--max-prompt-tokens");

  const int64_t vocab = tokenizer().vocab_size();
  std::vector<int64_t> ids(static_cast<size_t>(kMaxPromptTokens + kMaxTokensLimit), vocab - 1);
  Answer d = detokenize(port(), {{"tokens", ids}});
  ASSERT_EQ(d.status, 200) << d.raw;
  ids.push_back(0);
  expect_api_error(detokenize(port(), {{"tokens", ids}}), 400, "at most 64");
  expect_api_error(detokenize(port(), {{"tokens", {5, vocab}}}), 400, "tokens[1] = " + std::to_string(vocab));
  expect_api_error(detokenize(port(), {{"tokens", {-1}}}), 400, "outside the vocabulary");
  expect_api_error(detokenize(port(), {{"tokens", {uint64_t(1) << 63}}}), 400, "outside the vocabulary");
}

TEST_F(ServeTokenize, MalformedRequestsGetA400NamingTheField) {
  expect_api_error(tokenize(port(), json::object()), 400, "content is required");
  expect_api_error(tokenize(port(), {{"content", 5}}), 400, "content must be a string");
  expect_api_error(tokenize(port(), {{"content", "a"}, {"parse_special", "no"}}), 400, "parse_special must be a boolean");
  expect_api_error(tokenize(port(), {{"content", "a"}, {"prompt", "b"}}), 400, "unknown field 'prompt'");
  expect_api_error(detokenize(port(), {{"tokens", "1 2"}}), 400, "tokens must be an array");
  expect_api_error(detokenize(port(), {{"tokens", {1, 2.5}}}), 400, "tokens[1] must be an integer");
  expect_api_error(detokenize(port(), {{"content", "x"}}), 400, "unknown field 'content'");
  expect_api_error(post(port(), "[1, 2]", "/detokenize"), 400, "must be a JSON object");
  Answer get_it = get(port(), "/tokenize");
  EXPECT_EQ(get_it.status, 405) << get_it.raw;
  EXPECT_EQ(tokenize(port(), {{"content", "still serving"}}).status, 200);
}

// Both routes want the key, as every route but /health does; a model without a tokenizer answers
// them with the reason.
TEST(ServeTokenizeAccess, TheKeyGuardsBothRoutesAndAModelWithoutATokenizerSaysSo) {
  ServerProcess server({"-m", "preset:tiny", "--slots", "1", "--api-key", "sesame"});
  ASSERT_TRUE(server.listening()) << server.log();
  auto c = client(server.port());
  for (const char* path : {"/tokenize", "/detokenize"}) {
    auto refused = c->Post(path, R"({"content": "a", "tokens": [1]})", "application/json");
    ASSERT_TRUE(refused) << path;
    EXPECT_EQ(refused->status, 401) << path;
  }
  const httplib::Headers key = {{"Authorization", "Bearer sesame"}};
  auto t = c->Post("/tokenize", key, R"({"content": "a"})", "application/json");
  ASSERT_TRUE(t);
  Answer a{t->status, json::parse(t->body, nullptr, false), t->body};
  expect_api_error(a, 400, "carries no tokenizer");
  auto d = c->Post("/detokenize", key, R"({"tokens": [1]})", "application/json");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status, 400) << d->body;
  EXPECT_NE(d->body.find("no_tokenizer"), std::string::npos) << d->body;
  expect_clean_exit(server);
}

#else

TEST(ServeTokenize, SkippedWithoutHttplib) {
  GTEST_SKIP() << "skipped: this build has no cpp-httplib (apt-get install libcpp-httplib-dev)";
}

#endif  // MINFER_HAVE_HTTPLIB

}  // namespace
}  // namespace minfer::test
