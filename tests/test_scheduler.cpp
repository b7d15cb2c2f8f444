// The continuous-batching scheduler (engine/scheduler.h): admission, retirement and slot reuse,
// the step budget and chunked prefill, refusals, cancellation, stop tokens, the static policy,
// and the tokens: on the reference backend (one row's arithmetic does not depend on the others)
// a request gets exactly the tokens Decoder::generate gives it alone, greedy or sampled.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <thread>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/decoder.h"
#include "engine/scheduler.h"
#include "engine/serve_trace.h"
#include "model/llama.h"
#include "tests/random_llama.h"

namespace minfer::test {
namespace {

LlamaConfig small_config() {
  LlamaConfig c;
  c.dim = 48;
  c.hidden_dim = 96;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 61;
  c.n_ctx = 64;
  c.shared_classifier = false;
  c.stop_ids = {2};
  return c;
}

struct Fixture {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
};

Fixture make(BackendKind kind, uint64_t seed = 5) {
  Fixture f;
  f.backend = make_backend(kind);
  f.model = std::make_unique<LlamaModel>(*f.backend, random_llama_weights(small_config(), seed, 2.5), "m",
                                         LlamaOptions{});
  return f;
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t n) {
  std::vector<int32_t> p = {1};
  while (static_cast<int64_t>(p.size()) < n) p.push_back(static_cast<int32_t>(3 + rng() % 58));
  return p;
}

// What Decoder::generate gives one request on its own.
std::vector<int32_t> alone(LlamaModel& model, const std::vector<int32_t>& prompt, int64_t n, float temperature,
                           uint64_t seed) {
  DecoderOptions d;
  d.n_ctx = static_cast<int64_t>(prompt.size()) + n;
  Decoder decoder(model, d);
  GenerateOptions g;
  g.n_new = n;
  g.temperature = temperature;
  g.top_p = 0.9f;
  g.seed = seed;
  g.stop_at_eos = false;
  return decoder.generate({prompt}, g).tokens[0];
}

struct Collected {
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, RequestStats> stats;
};

ServeRequest request(Collected& c, uint64_t* id_slot, std::vector<int32_t> prompt, int64_t n, float temperature = 0.0f,
                     uint64_t seed = 1) {
  ServeRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.temperature = temperature;
  r.top_p = 0.9f;
  r.seed = seed;
  r.stop_at_eos = false;
  r.on_token = [&c, id_slot](int32_t t) {
    c.tokens[*id_slot].push_back(t);
    return true;
  };
  r.on_finish = [&c](const RequestStats& s) { c.stats[s.id] = s; };
  return r;
}

void run_to_end(Scheduler& s) {
  for (int i = 0; i < 100000 && s.step(); ++i) {
  }
}

TEST(Scheduler, MixedStepsGiveEachRequestItsTokensAlone) {
  Fixture f = make(BackendKind::ref);
  std::mt19937 rng(3);
  SchedulerOptions o;
  o.slots = 3;
  o.pass_rows = 7;  // prompts of up to 20 tokens take several steps beside the decode rows
  Scheduler scheduler(*f.model, o);
  Collected c;
  std::vector<uint64_t> ids(7);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> lengths = {5, 12, 3, 9, 1, 15, 7};
  for (size_t i = 0; i < ids.size(); ++i) {
    prompts.push_back(random_prompt(rng, 2 + int64_t(rng() % 19)));
    const float temperature = i % 2 ? 0.8f : 0.0f;  // greedy and sampled side by side
    ids[i] = scheduler.submit(request(c, &ids[i], prompts[i], lengths[i], temperature, 100 + i));
  }
  run_to_end(scheduler);
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(c.stats.count(ids[i])) << "request " << i << " never finished";
    EXPECT_EQ(c.stats[ids[i]].reason, FinishReason::length);
    EXPECT_EQ(c.stats[ids[i]].completion_tokens, lengths[i]);
    EXPECT_EQ(c.tokens[ids[i]], alone(*f.model, prompts[i], lengths[i], i % 2 ? 0.8f : 0.0f, 100 + i))
        << "request " << i;
  }
  const SchedulerMetrics m = scheduler.metrics();
  EXPECT_EQ(m.busy_slots, 0);
  EXPECT_EQ(m.queue_depth, 0);
  EXPECT_EQ(m.requests_finished, 7u);
  int64_t total = 0;
  for (int64_t n : lengths) total += n;
  EXPECT_EQ(m.generated_tokens, uint64_t(total));
}

// A conversation's next turn: its prompt is the last prompt, the answer and new tokens. The slot
// that served the last turn holds all but the answer's last token, so only the rest is prefilled;
// the tokens are those of the whole prompt run alone (exact on the reference backend).
TEST(Scheduler, PromptCachingPrefillsOnlyWhatASlotDoesNotHold) {
  Fixture f = make(BackendKind::ref);
  std::mt19937 rng(11);
  for (const bool caching : {true, false}) {
    SchedulerOptions o;
    o.slots = 2;
    o.prompt_cache = caching;
    Scheduler scheduler(*f.model, o);
    Collected c;
    const std::vector<int32_t> first = random_prompt(rng, 12);
    uint64_t a = 0;
    a = scheduler.submit(request(c, &a, first, 5));
    run_to_end(scheduler);
    ASSERT_EQ(c.tokens[a].size(), 5u);
    EXPECT_EQ(c.stats[a].cached_tokens, 0);

    // Another conversation meanwhile takes the other slot (the one used least recently), not this one.
    uint64_t other = 0;
    other = scheduler.submit(request(c, &other, {40, 41, 42}, 2));
    run_to_end(scheduler);
    EXPECT_EQ(c.stats[other].cached_tokens, 0);

    std::vector<int32_t> second = first;
    second.insert(second.end(), c.tokens[a].begin(), c.tokens[a].end());
    for (int i = 0; i < 6; ++i) second.push_back(static_cast<int32_t>(3 + rng() % 58));
    const uint64_t before = scheduler.metrics().prompt_tokens;
    uint64_t b = 0;
    b = scheduler.submit(request(c, &b, second, 4));
    run_to_end(scheduler);
    const int64_t held = caching ? 12 + 4 : 0;  // the prompt and the answer's tokens fed back
    EXPECT_EQ(c.stats[b].cached_tokens, held) << (caching ? "cache on" : "cache off");
    EXPECT_EQ(scheduler.metrics().prompt_tokens - before, uint64_t(int64_t(second.size()) - held));
    EXPECT_EQ(scheduler.metrics().prompt_tokens_cached, uint64_t(held));
    EXPECT_EQ(c.tokens[b], alone(*f.model, second, 4, 0.0f, 1));

    // The same prompt again: everything but its last token comes from the cache.
    uint64_t again = 0;
    again = scheduler.submit(request(c, &again, second, 4));
    run_to_end(scheduler);
    EXPECT_EQ(c.stats[again].cached_tokens, caching ? int64_t(second.size()) - 1 : 0);
    EXPECT_EQ(c.tokens[again], c.tokens[b]);
  }
}

// Two conversations that open alike (BOS and the same system message) take turns: each turn finds
// its own history, not the other's, though both are remembered under the same first tokens.
TEST(Scheduler, InterleavedConversationsFindTheirOwnHistory) {
  Fixture f = make(BackendKind::ref);
  std::mt19937 rng(12);
  SchedulerOptions o;
  o.slots = 2;
  o.kv_blocks = 4;  // two histories, and a block for the copy each turn makes
  Scheduler scheduler(*f.model, o);
  Collected c;
  const std::vector<int32_t> system = random_prompt(rng, 8);
  std::vector<std::vector<int32_t>> history(2, system);
  for (int turn = 0; turn < 3; ++turn) {
    for (int conversation = 0; conversation < 2; ++conversation) {
      std::vector<int32_t>& prompt = history[conversation];
      const size_t before = prompt.size();
      for (int i = 0; i < 5; ++i) prompt.push_back(static_cast<int32_t>(3 + rng() % 58));
      uint64_t id = 0;
      id = scheduler.submit(request(c, &id, prompt, 3));
      run_to_end(scheduler);
      SCOPED_TRACE("conversation " + std::to_string(conversation) + ", turn " + std::to_string(turn));
      // Turn 0 of the second conversation copies the system message from the first one's last
      // block. Later turns find their own history, all but the prompt's last token.
      const int64_t expected = turn > 0 ? int64_t(before) - 1 : conversation == 1 ? int64_t(system.size()) : 0;
      EXPECT_EQ(c.stats[id].cached_tokens, expected);
      prompt.insert(prompt.end(), c.tokens[id].begin(), c.tokens[id].end());
    }
  }
}

// A pool too small for every request at once: the newest running request is preempted when a
// sequence needs a block and none is left, and recomputes its prompt and its tokens later. No
// request is lost, and each gets the tokens it gets alone, greedy or sampled (its generator's state
// goes with it).
TEST(Scheduler, PreemptedRequestsResumeWithTheTokensTheyGetAlone) {
  Fixture f = make(BackendKind::ref);
  std::mt19937 rng(23);
  SchedulerOptions o;
  o.slots = 4;
  o.kv_block_size = 8;
  o.kv_blocks = 8;  // 64 positions for four requests of up to 44
  Scheduler scheduler(*f.model, o);
  Collected c;
  std::vector<uint64_t> ids(6);
  std::vector<std::vector<int32_t>> prompts;
  const std::vector<int64_t> lengths = {30, 24, 20, 28, 16, 25};
  for (size_t i = 0; i < ids.size(); ++i) {
    prompts.push_back(random_prompt(rng, 10 + int64_t(rng() % 9)));
    ids[i] = scheduler.submit(request(c, &ids[i], prompts[i], lengths[i], i % 2 ? 0.8f : 0.0f, 300 + i));
  }
  int64_t most_used = 0;
  while (scheduler.step()) {
    const SchedulerMetrics m = scheduler.metrics();
    EXPECT_LE(m.kv_blocks_used, 8);
    most_used = std::max(most_used, m.kv_blocks_used);
  }
  const SchedulerMetrics m = scheduler.metrics();
  EXPECT_GT(m.preemptions, 0u);
  EXPECT_EQ(most_used, 8);
  EXPECT_EQ(m.kv_blocks_total, 8);
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.requests_finished, ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(c.stats[ids[i]].reason, FinishReason::length) << "request " << i;
    EXPECT_EQ(c.tokens[ids[i]], alone(*f.model, prompts[i], lengths[i], i % 2 ? 0.8f : 0.0f, 300 + i))
        << "request " << i;
  }
}

// Requests that arrive together with one long prompt: the first computes its blocks, the others
// wait for them and share them (held, not copied), so the prompt is prefilled once.
TEST(Scheduler, ConcurrentIdenticalPromptsArePrefilledOnce) {
  Fixture f = make(BackendKind::ref);
  std::mt19937 rng(29);
  for (const bool caching : {true, false}) {
    SchedulerOptions o;
    o.slots = 6;
    o.pass_rows = 16;
    o.kv_block_size = 8;
    o.prompt_cache = caching;
    Scheduler scheduler(*f.model, o);
    Collected c;
    const std::vector<int32_t> prompt = random_prompt(rng, 37);
    std::vector<uint64_t> ids(6);
    for (auto& id : ids) id = scheduler.submit(request(c, &id, prompt, 4));
    int64_t most_used = 0;
    while (scheduler.step()) most_used = std::max(most_used, scheduler.metrics().kv_blocks_used);
    SCOPED_TRACE(caching ? "prefix caching" : "no prefix caching");
    // 36 tokens before the last: 4 full blocks of 8, shared; each request computes the rest.
    const int64_t shared = caching ? 32 : 0;
    const std::vector<int32_t> expected = alone(*f.model, prompt, 4, 0.0f, 1);
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(c.stats[ids[i]].cached_tokens, i == 0 ? 0 : shared) << "request " << i;
      EXPECT_EQ(c.tokens[ids[i]], expected) << "request " << i;
    }
    const SchedulerMetrics m = scheduler.metrics();
    EXPECT_EQ(m.prompt_tokens, uint64_t(37 * 6 - 5 * shared));
    EXPECT_EQ(m.prompt_tokens_cached, uint64_t(5 * shared));
    // Blocks: 5 per request alone (37 + 3 positions); 4 of them shared: 4 + 6 x 1.
    EXPECT_EQ(most_used, caching ? 10 : 30);
    EXPECT_EQ(m.kv_blocks_used, 0);
    // Each request's fifth block fills with the same 8 tokens (the same greedy answer): remembered once.
    EXPECT_EQ(m.kv_blocks_cached, caching ? 4 + 1 : 0);
  }
}

// A full pool evicts a finished request's last blocks first: its prefix is found from its first
// block on, so keeping the first ones keeps what can be found again.
TEST(Scheduler, APoolUnderPressureEvictsAPrefixFromItsEnd) {
  Fixture f = make(BackendKind::ref);
  std::mt19937 rng(31);
  SchedulerOptions o;
  o.slots = 1;
  o.kv_block_size = 8;
  o.kv_blocks = 4;
  Scheduler scheduler(*f.model, o);
  Collected c;
  const std::vector<int32_t> first = random_prompt(rng, 30);
  uint64_t a = 0, b = 0, again = 0;
  a = scheduler.submit(request(c, &a, first, 2));  // 31 positions: 3 full blocks and 7 rows
  run_to_end(scheduler);
  b = scheduler.submit(request(c, &b, {2, 9, 9, 9, 9, 9, 9, 9, 9}, 1));  // 2 blocks, both evicted ones
  run_to_end(scheduler);
  EXPECT_EQ(c.stats[b].cached_tokens, 0);
  again = scheduler.submit(request(c, &again, first, 2));
  run_to_end(scheduler);
  EXPECT_EQ(c.stats[again].cached_tokens, 16);  // a's first two blocks; its last two were evicted
  EXPECT_EQ(c.tokens[again], c.tokens[a]);
}

ServeRequest scoped(ServeRequest r, uint64_t scope) {
  r.cache_scope = scope;
  return r;
}

// Cache scopes (ServeRequest::cache_scope): requests with one prompt in two scopes, together. The
// other scope's request neither shares the first one's blocks nor waits for its prefill (it is
// admitted in the same step and computes its own); one of the same scope waits and shares them.
TEST(Scheduler, AnotherScopeNeitherSharesNorWaitsForAPromptsBlocks) {
  Fixture f = make(BackendKind::ref);
  std::mt19937 rng(37);
  SchedulerOptions o;
  o.slots = 3;
  o.pass_rows = 16;
  o.kv_block_size = 8;
  Scheduler scheduler(*f.model, o);
  Collected c;
  const std::vector<int32_t> prompt = random_prompt(rng, 37);
  uint64_t a = 0, b = 0, same = 0;
  a = scheduler.submit(scoped(request(c, &a, prompt, 4), 1));
  b = scheduler.submit(scoped(request(c, &b, prompt, 4), 2));
  same = scheduler.submit(scoped(request(c, &same, prompt, 4), 1));
  int64_t most_used = 0;
  while (scheduler.step()) most_used = std::max(most_used, scheduler.metrics().kv_blocks_used);
  EXPECT_EQ(c.stats[a].cached_tokens, 0);
  EXPECT_EQ(c.stats[b].cached_tokens, 0);
  EXPECT_EQ(c.stats[same].cached_tokens, 32);  // 4 full blocks of 8 before the prompt's last token
  EXPECT_EQ(c.stats[b].admitted, c.stats[a].admitted) << "scope 2 waited for scope 1's prefill";
  EXPECT_GT(c.stats[same].admitted, c.stats[a].admitted);
  // 5 blocks each (40 positions); the request of a's scope holds a's first 4 and one of its own.
  EXPECT_EQ(most_used, 5 + 5 + 1);
  // Every block a's scope filled is remembered once, and scope 2's five again, apart.
  EXPECT_EQ(scheduler.metrics().kv_blocks_cached, 5 + 5);
  const std::vector<int32_t> expected = alone(*f.model, prompt, 4, 0.0f, 1);
  for (uint64_t id : {a, b, same}) EXPECT_EQ(c.tokens[id], expected) << "request " << id;
  // Later, each scope finds its own blocks: all but the prompt's last token; scope 0 finds none.
  for (uint64_t scope : {1, 2, 0}) {
    uint64_t again = 0;
    again = scheduler.submit(scoped(request(c, &again, prompt, 1), scope));
    run_to_end(scheduler);
    EXPECT_EQ(c.stats[again].cached_tokens, scope == 0 ? 0 : 36) << "scope " << scope;
  }
}

// The first rows of a partly matching block (a full one, and a finished request's last one) are
// copied only for a request of the same scope.
TEST(Scheduler, APartlyMatchingBlockIsCopiedOnlyWithinItsScope) {
  Fixture f = make(BackendKind::ref);
  std::mt19937 rng(41);
  SchedulerOptions o;
  o.slots = 1;
  o.kv_block_size = 8;
  Scheduler scheduler(*f.model, o);
  Collected c;
  const std::vector<int32_t> prompt = random_prompt(rng, 10);
  uint64_t a = 0;
  a = scheduler.submit(scoped(request(c, &a, prompt, 2), 1));  // 11 positions: a full block and 3 rows
  run_to_end(scheduler);
  ASSERT_EQ(c.tokens[a].size(), 2u);
  // Its first 5 tokens, then others: the first 5 rows of a's first block.
  std::vector<int32_t> head(prompt.begin(), prompt.begin() + 5);
  head.insert(head.end(), {50, 51, 52});
  // Its prompt and first token, then others: a's first block and the 3 rows of its last one.
  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), {c.tokens[a][0], 53, 54});
  const struct {
    const std::vector<int32_t>& prompt;
    uint64_t scope;
    int64_t cached;
  } cases[] = {{head, 2, 0}, {longer, 3, 0}, {head, 1, 5}, {longer, 1, 8 + 3}};
  for (const auto& k : cases) {
    uint64_t id = 0;
    id = scheduler.submit(scoped(request(c, &id, k.prompt, 1), k.scope));
    run_to_end(scheduler);
    EXPECT_EQ(c.stats[id].cached_tokens, k.cached) << k.prompt.size() << " tokens in scope " << k.scope;
    EXPECT_EQ(c.tokens[id], alone(*f.model, k.prompt, 1, 0.0f, 1));
  }
}

TEST(Scheduler, ARequestNeedingMoreBlocksThanThePoolIsRefused) {
  Fixture f = make(BackendKind::cpu);
  SchedulerOptions o;
  o.kv_block_size = 8;
  o.kv_blocks = 3;
  Scheduler scheduler(*f.model, o);
  Collected c;
  uint64_t id = 0;
  EXPECT_NO_THROW(scheduler.submit(request(c, &id, std::vector<int32_t>(20, 5), 5)));  // 24 positions
  try {
    scheduler.submit(request(c, &id, std::vector<int32_t>(20, 5), 6));
    FAIL() << "25 positions in 3 blocks of 8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs 4 blocks of 8 positions > the KV cache's 3"), std::string::npos)
        << e.what();
  }
}

TEST(Scheduler, StepsRespectTheBudgetAndReuseFreedSlotsAtOnce) {
  Fixture f = make(BackendKind::cpu);
  std::mt19937 rng(4);
  SchedulerOptions o;
  o.slots = 2;
  o.pass_rows = 6;
  Scheduler scheduler(*f.model, o);
  Collected c;
  uint64_t a = 0, b = 0, d = 0;
  a = scheduler.submit(request(c, &a, random_prompt(rng, 20), 3));
  b = scheduler.submit(request(c, &b, random_prompt(rng, 4), 2));
  d = scheduler.submit(request(c, &d, random_prompt(rng, 3), 2));
  std::vector<std::pair<int64_t, int64_t>> rows;  // (decode, prompt) per step
  while (scheduler.step()) {
    rows.emplace_back(scheduler.last_step_decode_rows(), scheduler.last_step_prompt_rows());
    EXPECT_LE(rows.back().first + rows.back().second, 6);
    EXPECT_LE(scheduler.metrics().busy_slots, 2);
  }
  // Step 1: a's first 6 prompt tokens only (the oldest prompt first; nothing decodes yet).
  ASSERT_GE(rows.size(), 4u);
  EXPECT_EQ(rows[0], std::make_pair(int64_t(0), int64_t(6)));
  // a's 20-token prompt takes four steps (6 + 6 + 6 + 2); b's 4 tokens fill the rest of the last.
  int64_t prompt_rows = 0;
  for (const auto& r : rows) prompt_rows += r.second;
  // (Less what d found cached: b's prompt also began with BOS, in b's last block.)
  EXPECT_EQ(prompt_rows, 20 + 4 + 3 - c.stats[d].cached_tokens);
  EXPECT_EQ(c.stats[a].cached_tokens + c.stats[b].cached_tokens, 0);
  EXPECT_EQ(c.tokens[a].size(), 3u);
  EXPECT_EQ(c.tokens[b].size(), 2u);
  EXPECT_EQ(c.tokens[d].size(), 2u);
  // d waited for b's slot and was admitted the step b finished.
  EXPECT_GE(c.stats[d].admitted, c.stats[b].finished);
  EXPECT_LE(c.stats[d].admitted, c.stats[a].finished);
}

TEST(Scheduler, TheOldestPromptIsPrefilledFirst) {
  Fixture f = make(BackendKind::cpu);
  std::mt19937 rng(8);
  SchedulerOptions o;
  o.slots = 2;
  o.pass_rows = 4;
  Scheduler scheduler(*f.model, o);
  Collected c;
  uint64_t a = 0, b = 0;
  a = scheduler.submit(request(c, &a, random_prompt(rng, 9), 2));
  scheduler.step();  // a: 4 of 9
  b = scheduler.submit(request(c, &b, random_prompt(rng, 3), 2));
  scheduler.step();  // a: 8 of 9; b waits although its whole prompt would fit
  EXPECT_EQ(scheduler.last_step_prompt_rows(), 4);
  EXPECT_TRUE(c.tokens[a].empty());
  EXPECT_TRUE(c.tokens[b].empty());
  scheduler.step();  // a's last token and b's three: both get their first token
  EXPECT_EQ(c.tokens[a].size(), 1u);
  EXPECT_EQ(c.tokens[b].size(), 1u);
}

TEST(Scheduler, RefusesRequestsThatCanNeverRunWithTheNumbers) {
  Fixture f = make(BackendKind::cpu);
  SchedulerOptions o;
  o.slots = 2;
  o.n_ctx = 32;
  o.max_queue = 2;
  Scheduler scheduler(*f.model, o);
  Collected c;
  uint64_t id = 0;
  std::mt19937 rng(5);
  try {
    scheduler.submit(request(c, &id, random_prompt(rng, 20), 14));
    FAIL() << "a request past the context was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("20 + 14 - 1 = 33 positions > context 32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(scheduler.submit(request(c, &id, {}, 4)), Error);
  EXPECT_THROW(scheduler.submit(request(c, &id, {1, 99}, 4)), Error);  // outside the vocabulary
  EXPECT_THROW(scheduler.submit(request(c, &id, {1}, 0)), Error);
  scheduler.submit(request(c, &id, {1, 5}, 2));
  scheduler.submit(request(c, &id, {1, 6}, 2));
  try {
    scheduler.submit(request(c, &id, {1, 7}, 2));
    FAIL() << "a third request was queued past max_queue";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("queue is full"), std::string::npos) << e.what();
  }
  EXPECT_EQ(scheduler.metrics().requests_refused, 5u);
  EXPECT_EQ(scheduler.metrics().queue_depth, 2);
}

TEST(Scheduler, CancelStopTokensAndCallbacksEndRequests) {
  Fixture f = make(BackendKind::cpu);
  std::mt19937 rng(6);
  SchedulerOptions o;
  o.slots = 2;
  Scheduler scheduler(*f.model, o);
  Collected c;
  uint64_t running = 0, queued = 0, stopped = 0, third = 0;
  running = scheduler.submit(request(c, &running, random_prompt(rng, 4), 40));
  // A request whose callback ends it after three tokens.
  ServeRequest r = request(c, &stopped, random_prompt(rng, 4), 40);
  r.on_token = [&](int32_t t) {
    c.tokens[stopped].push_back(t);
    return c.tokens[stopped].size() < 3;
  };
  stopped = scheduler.submit(std::move(r));
  scheduler.step();  // both slots busy from here
  queued = scheduler.submit(request(c, &queued, random_prompt(rng, 4), 40));
  scheduler.step();
  scheduler.cancel(running);
  scheduler.cancel(queued);
  scheduler.step();
  EXPECT_EQ(c.stats[running].reason, FinishReason::cancelled);
  EXPECT_GE(c.stats[running].completion_tokens, 1);
  EXPECT_EQ(c.stats[queued].reason, FinishReason::cancelled);
  EXPECT_EQ(c.stats[queued].completion_tokens, 0);
  EXPECT_EQ(c.stats[queued].admitted, 0.0);  // never given a slot
  run_to_end(scheduler);
  EXPECT_EQ(c.stats[stopped].reason, FinishReason::stop);
  EXPECT_EQ(c.tokens[stopped].size(), 3u);
  // A stop token ends a request without being delivered: stop at whatever comes first.
  Collected c2;
  ServeRequest s = request(c2, &third, random_prompt(rng, 5), 10);
  const std::vector<int32_t> first = alone(*f.model, s.prompt, 10, 0.0f, 1);
  s.stop_tokens = {first[2]};
  third = scheduler.submit(std::move(s));
  run_to_end(scheduler);
  const auto& got = c2.tokens[third];
  const size_t cut = std::find(first.begin(), first.end(), first[2]) - first.begin();
  EXPECT_EQ(got, std::vector<int32_t>(first.begin(), first.begin() + cut));
  EXPECT_EQ(c2.stats[third].reason, FinishReason::stop);
  EXPECT_EQ(scheduler.metrics().busy_slots, 0);
  EXPECT_EQ(scheduler.metrics().requests_cancelled, 2u);
}

TEST(Scheduler, StaticBatchesWaitForTheWholeBatch) {
  Fixture f = make(BackendKind::cpu);
  std::mt19937 rng(7);
  SchedulerOptions o;
  o.slots = 2;
  o.policy = SchedulerOptions::Policy::static_batches;
  Scheduler scheduler(*f.model, o);
  Collected c;
  uint64_t a = 0, b = 0, d = 0;
  a = scheduler.submit(request(c, &a, random_prompt(rng, 3), 2));
  b = scheduler.submit(request(c, &b, random_prompt(rng, 3), 9));
  d = scheduler.submit(request(c, &d, random_prompt(rng, 3), 2));
  run_to_end(scheduler);
  EXPECT_GE(c.stats[d].admitted, c.stats[b].finished);  // not when a's slot freed
  EXPECT_LT(c.stats[a].finished, c.stats[b].finished);
  EXPECT_EQ(c.tokens[d].size(), 2u);
}

// Every request of a later static batch starts its sequence from position 0: each gets the
// tokens it gets alone, batch after batch.
TEST(Scheduler, EveryStaticBatchGivesEachRequestItsTokensAlone) {
  Fixture f = make(BackendKind::ref);
  std::mt19937 rng(19);
  SchedulerOptions o;
  o.slots = 2;
  o.policy = SchedulerOptions::Policy::static_batches;
  Scheduler scheduler(*f.model, o);
  Collected c;
  std::vector<uint64_t> ids(6);
  std::vector<std::vector<int32_t>> prompts;
  const std::vector<int64_t> lengths = {4, 7, 6, 3, 5, 5};
  for (size_t i = 0; i < ids.size(); ++i) {
    prompts.push_back(random_prompt(rng, 2 + int64_t(rng() % 9)));
    ids[i] = scheduler.submit(request(c, &ids[i], prompts[i], lengths[i], i % 2 ? 0.8f : 0.0f, 200 + i));
  }
  run_to_end(scheduler);
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(c.tokens[ids[i]], alone(*f.model, prompts[i], lengths[i], i % 2 ? 0.8f : 0.0f, 200 + i))
        << "request " << i << " (static batch " << i / 2 << ")";
}

TEST(Scheduler, StaticBatchesGoOnDecodingFinishedRows) {
  Fixture f = make(BackendKind::cpu);
  std::mt19937 rng(11);
  SchedulerOptions o;
  o.slots = 2;
  o.policy = SchedulerOptions::Policy::static_batches;
  Scheduler scheduler(*f.model, o);
  Collected c;
  uint64_t a = 0, b = 0;
  a = scheduler.submit(request(c, &a, random_prompt(rng, 3), 2));
  b = scheduler.submit(request(c, &b, random_prompt(rng, 5), 9));
  run_to_end(scheduler);
  ASSERT_LT(c.stats[a].finished, c.stats[b].finished);
  // The finished row kept a row at its next position every step until b ended, so both
  // sequences advanced by the same number of decode steps from their prompts.
  EXPECT_EQ(scheduler.decoder().position(0) - 3, scheduler.decoder().position(1) - 5);
  EXPECT_GT(scheduler.decoder().position(0), 3 + int64_t(c.tokens[a].size()));

  // A finished row that reaches the end of its slot's context starts over at position 0 and the
  // batch goes on: a's long prompt fills its slot two steps after it finishes, b still runs.
  SchedulerOptions small = o;
  small.n_ctx = 16;
  Scheduler tight(*f.model, small);
  Collected c2;
  uint64_t long_prompt = 0, long_output = 0;
  long_prompt = tight.submit(request(c2, &long_prompt, random_prompt(rng, 14), 1));
  long_output = tight.submit(request(c2, &long_output, random_prompt(rng, 2), 14));
  run_to_end(tight);
  EXPECT_EQ(c2.tokens[long_prompt].size(), 1u);
  EXPECT_EQ(c2.tokens[long_output].size(), 14u);
  EXPECT_LT(tight.decoder().position(0), 14);  // restarted
  EXPECT_EQ(tight.metrics().busy_slots, 0);
}

TEST(Scheduler, RunServesRequestsFromOtherThreads) {
  Fixture f = make(BackendKind::cpu);
  SchedulerOptions o;
  o.slots = 4;
  Scheduler scheduler(*f.model, o);
  std::atomic<bool> stop{false};
  std::thread engine([&] { scheduler.run(stop); });
  std::atomic<int> done{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t)
    clients.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        std::mutex m;
        std::condition_variable cv;
        bool finished = false;
        int64_t got = 0;
        ServeRequest r;
        r.prompt = {1, int32_t(3 + t), int32_t(4 + i)};
        r.max_tokens = 3 + i;
        r.stop_at_eos = false;
        r.on_token = [&](int32_t) {
          ++got;
          return true;
        };
        r.on_finish = [&](const RequestStats&) {
          std::lock_guard<std::mutex> lock(m);
          finished = true;
          cv.notify_one();
        };
        scheduler.submit(std::move(r));
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return finished; });
        EXPECT_EQ(got, 3 + i);
        ++done;
      }
    });
  for (auto& t : clients) t.join();
  stop = true;
  scheduler.notify();
  engine.join();
  EXPECT_EQ(done.load(), 20);
  EXPECT_EQ(scheduler.metrics().requests_finished, 20u);
  EXPECT_EQ(scheduler.metrics().busy_slots, 0);
}

// Issue 20: `serve` set the engine's stop flag and called notify() without the scheduler's lock,
// so a notify that came while run() stood between its look at the flag and its wait was lost and
// the process never exited. The hook holds the engine in that window while another thread stops
// it; with the lock taken in notify() the stop waits for the engine to sleep and then wakes it.
TEST(Scheduler, AStopBetweenTheEnginesCheckAndItsWaitStillWakesIt) {
  Fixture f = make(BackendKind::ref);
  Scheduler scheduler(*f.model, SchedulerOptions{});
  std::atomic<bool> stop{false}, in_window{false}, stopping{false}, returned{false};
  std::atomic<int> sleeps{0};
  scheduler.set_before_sleep_hook([&] {
    if (sleeps++ > 0) return;  // hold the first sleep only
    in_window = true;
    for (int i = 0; i < 2000 && !stopping; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // an unlocked notify lands here
  });
  std::thread engine([&] {
    scheduler.run(stop);
    returned = true;
  });
  for (int i = 0; i < 5000 && !in_window; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(in_window.load());
  std::thread stopper([&] {
    stop = true;
    stopping = true;
    scheduler.notify();
  });
  for (int i = 0; i < 2000 && !returned; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool woke = returned.load();
  if (!woke) scheduler.notify();  // the lost wake-up: wake it again so the test can end
  stopper.join();
  engine.join();
  EXPECT_TRUE(woke) << "run() slept through a stop set between its check and its wait";
}

TEST(ServeTrace, TracesAreSeededAndReplayAnswersEveryRequest) {
  TraceOptions t;
  t.n_requests = 12;
  t.rate = 200.0;
  t.prompt_min = 2;
  t.prompt_max = 12;
  t.output_min = 1;
  t.output_max = 20;
  const auto a = make_trace(t, 61, 1), b = make_trace(t, 61, 1);
  ASSERT_EQ(a.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_EQ(a[i].max_tokens, b[i].max_tokens);
    EXPECT_GE(a[i].max_tokens, 1);
    EXPECT_LE(a[i].max_tokens, 20);
    EXPECT_EQ(a[i].prompt.front(), 1);
    if (i > 0) {
      EXPECT_GE(a[i].arrival, a[i - 1].arrival);
    }
  }
  // Without a BOS (llama-server names none where its tokenizer adds none) the same seed asks for the
  // same work: the same arrivals, lengths and tokens but the first. With a shared prefix too.
  for (int64_t shared : {0, 5}) {
    t.shared_prefix = shared;
    const auto with_bos = make_trace(t, 61, 1), without = make_trace(t, 61, -1);
    for (size_t i = 0; i < with_bos.size(); ++i) {
      EXPECT_EQ(with_bos[i].arrival, without[i].arrival);
      EXPECT_EQ(with_bos[i].max_tokens, without[i].max_tokens);
      ASSERT_EQ(with_bos[i].prompt.size(), without[i].prompt.size()) << "request " << i << ", shared " << shared;
      EXPECT_EQ(with_bos[i].prompt.front(), 1);
      EXPECT_GE(without[i].prompt.front(), 3);
      EXPECT_TRUE(std::equal(with_bos[i].prompt.begin() + 1, with_bos[i].prompt.end(), without[i].prompt.begin() + 1));
    }
  }
  t.shared_prefix = 0;
  Fixture f = make(BackendKind::cpu);
  SchedulerOptions o;
  o.slots = 4;
  o.n_ctx = 40;
  Scheduler scheduler(*f.model, o);
  ServeRun run = replay(scheduler, a);
  int64_t want = 0;
  for (const auto& r : a) want += r.max_tokens;
  EXPECT_EQ(run.output_tokens, want);
  for (const auto& r : run.requests) EXPECT_EQ(r.reason, FinishReason::length);
  EXPECT_GT(run.output_tokens_per_second(), 0.0);
  EXPECT_GT(run.mean_occupancy(), 0.0);
  EXPECT_LE(run.mean_occupancy(), 4.0);
  EXPECT_GE(run.max_occupancy(), 1);
  EXPECT_LE(run.max_occupancy(), 4);
  const LatencySummary s = summarize({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  EXPECT_DOUBLE_EQ(s.median, 5.5);
  EXPECT_DOUBLE_EQ(s.p90, 9.1);
}

// A shared prefix: every prompt begins with the same tokens (BOS first), then its own prompt-len
// tokens; replayed with prefix caching, the prefix's full blocks are prefilled once.
TEST(ServeTrace, ASharedPrefixBeginsEveryPromptAndIsPrefilledOnce) {
  TraceOptions t;
  t.n_requests = 5;
  t.prompt_min = 3;
  t.prompt_max = 6;
  t.output_min = 2;
  t.output_max = 4;
  t.shared_prefix = 20;
  const auto trace = make_trace(t, 61, 1);
  for (const auto& r : trace) {
    ASSERT_GE(r.prompt.size(), 23u);
    ASSERT_LE(r.prompt.size(), 26u);
    EXPECT_EQ(r.prompt.front(), 1);
    EXPECT_TRUE(std::equal(trace[0].prompt.begin(), trace[0].prompt.begin() + 20, r.prompt.begin()));
  }
  EXPECT_NE(trace[0].prompt, trace[1].prompt);
  Fixture f = make(BackendKind::cpu);
  SchedulerOptions o;
  o.slots = 5;
  o.n_ctx = 40;
  o.kv_block_size = 8;
  Scheduler scheduler(*f.model, o);
  const ServeRun run = replay(scheduler, trace);
  // 16 of the 20 shared tokens are whole blocks: the first request computes them, the others hold them.
  EXPECT_EQ(run.prompt_tokens - int64_t(scheduler.metrics().prompt_tokens), 4 * 16);
}

}  // namespace
}  // namespace minfer::test
