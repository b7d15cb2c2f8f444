// logprobs on both routes (engine/logprobs.h, serve/logprobs_json.h): parsed at their limits and
// refused one past them with a 400 naming the field; through a real server, each token's logprob is
// minus its NLL as `minfer perplexity` computes it (log_sum_exp over the every-row logits of the same
// ids), the top ones sorted with the greedy token first, a stream's entries the whole answer's, and
// a chat's entries spell its content.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/backend.h"
#include "engine/decoder.h"
#include "engine/perplexity.h"
#include "formats/model_files.h"
#include "serve/serve_api.h"
#include "tests/serve_http_support.h"

namespace minfer::test {
namespace {

const serve::ApiLimits kLimits{50, 20};

int parsed_top(const nlohmann::json& fields, bool chat) {
  nlohmann::json body = fields;
  if (chat) body["messages"] = {{{"role", "user"}, {"content", "hi"}}};
  else body["prompt"] = {1, 2};
  return (chat ? serve::parse_chat_request(body.dump(), kLimits)
               : serve::parse_completion_request(body.dump(), 100, true, kLimits))
      .top_logprobs;
}

serve::ApiError refusal(const nlohmann::json& fields, bool chat) {
  try {
    parsed_top(fields, chat);
  } catch (const serve::ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << fields.dump();
  return {};
}

TEST(ServeLogprobsParse, LimitsOnBothRoutes) {
  EXPECT_EQ(parsed_top({{"logprobs", 5}}, false), 5);
  EXPECT_EQ(parsed_top({{"logprobs", 0}}, false), 0);
  EXPECT_EQ(parsed_top({{"logprobs", nullptr}}, false), -1);
  EXPECT_EQ(parsed_top({{"logprobs", true}, {"top_logprobs", 20}}, true), 20);
  EXPECT_EQ(parsed_top({{"logprobs", true}}, true), 0);
  EXPECT_EQ(parsed_top({{"logprobs", false}}, true), -1);
  EXPECT_EQ(parsed_top({{"top_logprobs", nullptr}}, true), -1);
  struct Case {
    nlohmann::json fields;
    bool chat;
    std::string param, fragment;
  };
  for (const Case& c : std::vector<Case>{
           {{{"logprobs", 6}}, false, "logprobs", "logprobs = 6: 0 to 5"},
           {{{"logprobs", -1}}, false, "logprobs", "logprobs = -1: 0 to 5"},
           {{{"logprobs", true}}, false, "logprobs", "must be an integer"},
           {{{"logprobs", true}, {"top_logprobs", 21}}, true, "top_logprobs", "top_logprobs = 21: 0 to 20"},
           {{{"logprobs", true}, {"top_logprobs", -1}}, true, "top_logprobs", "0 to 20"},
           {{{"top_logprobs", 1}}, true, "top_logprobs", "needs \"logprobs\": true"},
           {{{"logprobs", false}, {"top_logprobs", 0}}, true, "top_logprobs", "needs \"logprobs\": true"},
           {{{"logprobs", 1}}, true, "logprobs", "must be a boolean"}}) {
    const serve::ApiError e = refusal(c.fields, c.chat);
    EXPECT_EQ(e.status, 400) << c.fields.dump();
    EXPECT_EQ(e.param, c.param) << c.fields.dump();
    EXPECT_NE(e.message.find(c.fragment), std::string::npos) << c.fields.dump() << ": " << e.message;
  }
  try {
    serve::parse_completion_request(R"({"prompt": [1], "logprobs": 1})", 100, false, kLimits);
    ADD_FAILURE() << "logprobs without a tokenizer accepted";
  } catch (const serve::ApiError& e) {
    EXPECT_EQ(e.param, "logprobs");
  }
}

// echo: a boolean, with a tokenizer; max_tokens 0 with it only.
TEST(ServeEchoParse, MaxTokensZeroOnlyWithEcho) {
  auto parse = [](const nlohmann::json& fields, bool has_tokenizer = true) {
    nlohmann::json body = fields;
    body["prompt"] = {1, 2};
    return serve::parse_completion_request(body.dump(), 100, has_tokenizer, kLimits);
  };
  const serve::CompletionRequest r = parse({{"echo", true}, {"max_tokens", 0}, {"logprobs", 5}});
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.max_tokens, 0);
  EXPECT_FALSE(parse({{"echo", false}}).echo);
  EXPECT_EQ(parse({{"echo", true}, {"max_tokens", 1}}).max_tokens, 1);
  EXPECT_TRUE(parse({{"echo", true}, {"max_tokens", 0}, {"stream", true}}).stream);
  struct Case {
    nlohmann::json fields;
    std::string param, fragment;
  };
  for (const Case& c : std::vector<Case>{
           {{{"max_tokens", 0}}, "max_tokens", "0 only with echo"},
           {{{"max_tokens", 0}, {"echo", false}}, "max_tokens", "0 only with echo"},
           {{{"max_tokens", -1}, {"echo", true}}, "max_tokens", "at least 1"},
           {{{"echo", 1}}, "echo", "must be a boolean"}}) {
    try {
      parse(c.fields);
      ADD_FAILURE() << "accepted: " << c.fields.dump();
    } catch (const serve::ApiError& e) {
      EXPECT_EQ(e.status, 400) << c.fields.dump();
      EXPECT_EQ(e.param, c.param) << c.fields.dump();
      EXPECT_NE(e.message.find(c.fragment), std::string::npos) << c.fields.dump() << ": " << e.message;
    }
  }
  EXPECT_THROW(parse({{"echo", true}}, false), serve::ApiError);
}

#if MINFER_HAVE_HTTPLIB

// minus the NLL of each of `answer`'s tokens after `prompt`, as engine/perplexity.cpp scores ids.
std::vector<double> perplexity_logprobs(const std::string& model_path, const std::vector<int32_t>& prompt,
                                        const std::vector<int32_t>& answer) {
  BackendOptions bo;
  bo.threads = 2;
  auto backend = make_backend(BackendKind::cpu, bo);
  auto model = load_model(model_path, *backend, LlamaOptions{});
  const int64_t vocab = model->info().vocab_size;
  DecoderOptions d;
  d.n_seqs = 1;
  d.n_ctx = int64_t(prompt.size() + answer.size());
  d.pass_rows = d.n_ctx;
  d.logits_every_row = true;
  Decoder scorer(*model, d);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), answer.begin(), answer.end());
  std::vector<double> out;
  scorer.prefill_scored(0, all, [&](int64_t p, const float* z) {
    if (p + 1 >= int64_t(prompt.size()) && p + 1 < int64_t(all.size()))
      out.push_back(double(z[all[size_t(p + 1)]]) - log_sum_exp(z, vocab));
  });
  return out;
}

class ServeLogprobs : public SharedServer<ServeLogprobs> {
 public:
  static std::vector<std::string> server_args() { return {"-m", kTextModel, "--slots", "2", "--ctx", "128"}; }
};

TEST_F(ServeLogprobs, CompletionsLogprobsArePerplexitysAndStreamTheSame) {
  const std::vector<int32_t> prompt = {1, 450, 600};
  const json body = {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 3}, {"ignore_eos", true}};
  Answer a = post(port(), body.dump());
  ASSERT_EQ(a.status, 200) << a.raw;
  const json& choice = a.body["choices"][0];
  const std::vector<int32_t> ids = ids_of(choice["token_ids"]);
  ASSERT_EQ(ids.size(), 8u);
  const json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 8u) << lp.dump();
  const std::vector<double> expected = perplexity_logprobs(kTextModel, prompt, ids);
  ASSERT_EQ(expected.size(), 8u);
  std::string joined;
  for (size_t k = 0; k < 8; ++k) {
    EXPECT_NEAR(lp["token_logprobs"][k].get<double>(), expected[k], 1e-3) << k;
    EXPECT_EQ(lp["text_offset"][k].get<size_t>(), joined.size()) << k;
    joined += lp["tokens"][k].get<std::string>();
    const json& top = lp["top_logprobs"][k];
    ASSERT_EQ(top.size(), 3u) << top.dump();
    double best = -1e30;
    for (const auto& [token, value] : top.items()) best = std::max(best, value.get<double>());
    EXPECT_EQ(best, lp["token_logprobs"][k].get<double>()) << "greedy: the token is the most likely, " << k;
  }
  EXPECT_EQ(joined, choice["text"].get<std::string>());

  json streamed = body;
  streamed["stream"] = true;
  httplib::Result r = client(port())->Post("/v1/completions", streamed.dump(), "application/json");
  ASSERT_TRUE(r);
  const SseEvents events = parse_sse(r->body);
  ASSERT_TRUE(events.done && events.well_formed) << r->body;
  size_t k = 0;
  for (const json& e : events.events) {
    const json& l = e["choices"][0]["logprobs"];
    if (l.is_null()) continue;
    for (size_t j = 0; j < l["tokens"].size(); ++j, ++k) {
      ASSERT_LT(k, 8u);
      // (The stream finds the prompt cached: its rows are computed in other passes, which moves the
      // last bits of the logits.)
      EXPECT_NEAR(l["token_logprobs"][j].get<double>(), lp["token_logprobs"][k].get<double>(), 1e-4) << k;
      EXPECT_EQ(l["tokens"][j], lp["tokens"][k]) << k;
      EXPECT_EQ(l["text_offset"][j], lp["text_offset"][k]) << k;
      EXPECT_EQ(l["top_logprobs"][j].size(), lp["top_logprobs"][k].size()) << k;
    }
  }
  EXPECT_EQ(k, 8u);
}

// echo with logprobs, as lm-eval's loglikelihood sends it: the prompt's tokens first (the first
// one's logprob and top ones null), each later one's logprob minus perplexity's NLL of it, then the
// generated ones'; the text the prompt's and the completion's; a prompt of more rows than a pass
// has logits rows for (kPromptLogitsRows) and a second, cached, request alike; a stream's events
// (the prompt's first) add up to the whole answer.
TEST_F(ServeLogprobs, EchoGivesThePromptsLogprobsFirst) {
  std::vector<int32_t> prompt = {1};
  for (int32_t i = 0; i < 40; ++i) prompt.push_back(300 + (i * 53) % 600);
  for (int max_tokens : {0, 3, 0}) {  // the third finds the prompt's blocks cached
    SCOPED_TRACE("max_tokens " + std::to_string(max_tokens));
    const json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0},
                       {"echo", true},     {"logprobs", 2},            {"ignore_eos", true}};
    Answer a = post(port(), body.dump());
    ASSERT_EQ(a.status, 200) << a.raw;
    const json& choice = a.body["choices"][0];
    const std::vector<int32_t> ids = ids_of(choice["token_ids"]);
    ASSERT_EQ(ids.size(), size_t(max_tokens));
    EXPECT_EQ(choice["finish_reason"], "length");
    EXPECT_EQ(a.body["usage"]["completion_tokens"], max_tokens);
    const json& lp = choice["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), prompt.size() + ids.size()) << lp.dump();
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    EXPECT_TRUE(lp["top_logprobs"][0].is_null());
    std::vector<int32_t> rest(prompt.begin() + 1, prompt.end());
    rest.insert(rest.end(), ids.begin(), ids.end());
    const std::vector<double> expected = perplexity_logprobs(kTextModel, {prompt[0]}, rest);
    ASSERT_EQ(expected.size(), rest.size());
    std::string joined;
    for (size_t k = 0; k < lp["tokens"].size(); ++k) {
      EXPECT_EQ(lp["text_offset"][k].get<size_t>(), joined.size()) << k;
      joined += lp["tokens"][k].get<std::string>();
      if (k == 0) continue;
      EXPECT_NEAR(lp["token_logprobs"][k].get<double>(), expected[k - 1], 1e-3) << k;
      EXPECT_EQ(lp["top_logprobs"][k].size(), 2u) << k;
    }
    EXPECT_EQ(joined, choice["text"].get<std::string>());
    json streamed = body;
    streamed["stream"] = true;
    httplib::Result r = client(port())->Post("/v1/completions", streamed.dump(), "application/json");
    ASSERT_TRUE(r);
    const SseEvents events = parse_sse(r->body);
    ASSERT_TRUE(events.done && events.well_formed) << r->body;
    std::string text;
    json all = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"text_offset", json::array()}};
    for (const json& e : events.events) {
      if (e["choices"].empty()) continue;
      text += e["choices"][0]["text"].get<std::string>();
      const json& l = e["choices"][0]["logprobs"];
      if (l.is_null()) continue;
      for (const char* key : {"tokens", "token_logprobs", "text_offset"})
        for (const json& v : l[key]) all[key].push_back(v);
    }
    EXPECT_EQ(text, choice["text"].get<std::string>());
    ASSERT_EQ(all["tokens"], lp["tokens"]);
    EXPECT_EQ(all["text_offset"], lp["text_offset"]);
    EXPECT_TRUE(all["token_logprobs"][0].is_null());
    EXPECT_EQ(all["token_logprobs"], lp["token_logprobs"]) << "the same rows in passes of the same shapes";
  }
}

// echo without logprobs: the prompt's text before the completion's, with max_tokens 0 the prompt's only.
TEST_F(ServeLogprobs, EchoWithoutLogprobsPutsThePromptsTextFirst) {
  const json plain = {{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0}};
  Answer completion = post(port(), plain.dump());
  ASSERT_EQ(completion.status, 200) << completion.raw;
  json echoed = plain;
  echoed["echo"] = true;
  Answer a = post(port(), echoed.dump());
  ASSERT_EQ(a.status, 200) << a.raw;
  const std::string continuation = completion.body["choices"][0]["text"];
  EXPECT_EQ(a.body["choices"][0]["text"], "Once upon a time" + continuation);
  EXPECT_TRUE(a.body["choices"][0]["logprobs"].is_null());
  echoed["max_tokens"] = 0;
  a = post(port(), echoed.dump());
  ASSERT_EQ(a.status, 200) << a.raw;
  EXPECT_EQ(a.body["choices"][0]["text"], "Once upon a time");
  EXPECT_EQ(a.body["choices"][0]["finish_reason"], "length");
  expect_api_error(post(port(), json{{"prompt", "Once"}, {"max_tokens", 0}}.dump()), 400, "0 only with echo");
}

const std::string kChatModel = MINFER_SOURCE_DIR "/tests/data/models/smollm-chat";

TEST(ServeChatLogprobs, EntriesSpellTheContentSortedAndStreamedTheSame) {
  ServerProcess server({"-m", kChatModel, "--slots", "1", "--ctx", "256", "--max-tokens-limit", "16"});
  ASSERT_TRUE(server.listening()) << server.log();
  const json body = {{"messages", {{{"role", "user"}, {"content", "Hello there"}}}},
                     {"max_tokens", 10},
                     {"temperature", 0},
                     {"logprobs", true},
                     {"top_logprobs", 4}};
  Answer a = post(server.port(), body.dump(), "/v1/chat/completions");
  ASSERT_EQ(a.status, 200) << a.raw;
  const json& choice = a.body["choices"][0];
  const json& content = choice["logprobs"]["content"];
  ASSERT_TRUE(content.is_array() && !content.empty()) << a.raw;
  EXPECT_EQ(content.size(), a.body["usage"]["completion_tokens"].get<size_t>());
  std::string spelled;
  for (const json& entry : content) {
    spelled += entry["token"].get<std::string>();
    std::string bytes;
    for (const json& b : entry["bytes"]) bytes += static_cast<char>(b.get<int>());
    EXPECT_EQ(bytes, entry["token"].get<std::string>());  // the fixture's text is valid UTF-8
    const json& top = entry["top_logprobs"];
    ASSERT_EQ(top.size(), 4u);
    EXPECT_EQ(top[0]["token"], entry["token"]) << "greedy: the token is the most likely";
    EXPECT_EQ(top[0]["logprob"], entry["logprob"]);
    for (size_t j = 1; j < 4; ++j) EXPECT_GE(top[j - 1]["logprob"].get<double>(), top[j]["logprob"].get<double>());
    EXPECT_LE(entry["logprob"].get<double>(), 0.0);
  }
  EXPECT_EQ(spelled, choice["message"]["content"].get<std::string>());

  json streamed = body;
  streamed["stream"] = true;
  httplib::Result r = client(server.port())->Post("/v1/chat/completions", streamed.dump(), "application/json");
  ASSERT_TRUE(r);
  const SseEvents events = parse_sse(r->body);
  ASSERT_TRUE(events.done && events.well_formed) << r->body;
  json all = json::array();
  for (const json& e : events.events)
    if (!e["choices"].empty() && e["choices"][0]["logprobs"].is_object())
      for (const json& entry : e["choices"][0]["logprobs"]["content"]) all.push_back(entry);
  ASSERT_EQ(all.size(), content.size());
  for (size_t k = 0; k < all.size(); ++k) {  // (the stream's prompt is cached: last bits move)
    EXPECT_EQ(all[k]["token"], content[k]["token"]) << k;
    EXPECT_NEAR(all[k]["logprob"].get<double>(), content[k]["logprob"].get<double>(), 1e-4) << k;
    ASSERT_EQ(all[k]["top_logprobs"].size(), 4u) << k;
  }
  expect_api_error(post(server.port(), json{{"messages", body["messages"]}, {"top_logprobs", 21}, {"logprobs", true}}.dump(),
                        "/v1/chat/completions"),
                   400, "top_logprobs = 21: 0 to 20");
  expect_clean_exit(server);
}

#endif  // MINFER_HAVE_HTTPLIB

}  // namespace
}  // namespace minfer::test
