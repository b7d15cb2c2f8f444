// demo prompt-cache: what a conversation costs a server with and without prompt caching. A chat
// client sends the whole history every turn: turn N's prompt is turn N-1's prompt, its answer
// and the new message. Without a cache the server prefills all of it again, so the time to the
// first token grows with the conversation; with prompt caching (engine/scheduler.h) the blocks of
// turn N-1 are still cached, by their tokens, and only the answer's last token and the new message
// are prefilled: the time grows only as far as those few rows attend over a longer history.
// Same model, same messages, the two settings in turn (A B B A, four rounds), each figure the median
// of its rounds.
#include <algorithm>
#include <random>

#include "engine/scheduler.h"
#include "engine/serve_trace.h"
#include "formats/model_files.h"
#include "lessons/demos.h"
#include "model/llama.h"

namespace minfer::demo {

namespace {

struct Conversation {
  int64_t turns, message_tokens, answer_tokens;
  int64_t context() const { return 1 + turns * (message_tokens + answer_tokens); }
};

struct Turn {
  int64_t prompt_tokens = 0, cached_tokens = 0;
  double ttft = 0;  // seconds
};

// One conversation through a scheduler of two slots, a turn at a time, greedy: the user's
// messages are seeded random tokens (the same in every run), the answers the model's own.
std::vector<Turn> converse(LlamaModel& model, const Conversation& c, bool caching) {
  SchedulerOptions so;
  so.slots = 2;
  so.n_ctx = c.context();
  so.pass_rows = 512;
  so.prompt_cache = caching;
  Scheduler scheduler(model, so);
  const ModelInfo& info = model.info();
  std::mt19937 rng(7);
  std::vector<int32_t> prompt = {info.bos_id >= 0 ? info.bos_id : 0};
  std::vector<Turn> turns;
  for (int64_t t = 0; t < c.turns; ++t) {
    for (int64_t i = 0; i < c.message_tokens; ++i)
      prompt.push_back(static_cast<int32_t>(3 + rng() % uint32_t(info.vocab_size - 3)));
    std::vector<int32_t> answer;
    RequestStats stats;
    ServeRequest r;
    r.prompt = prompt;
    r.max_tokens = c.answer_tokens;
    r.temperature = 0.0f;
    r.stop_at_eos = false;
    r.on_token = [&](int32_t token) {
      answer.push_back(token);
      return true;
    };
    r.on_finish = [&](const RequestStats& s) { stats = s; };
    scheduler.submit(std::move(r));
    while (scheduler.step()) {
    }
    turns.push_back({stats.prompt_tokens, stats.cached_tokens, stats.ttft()});
    prompt.insert(prompt.end(), answer.begin(), answer.end());
  }
  return turns;
}

void run_half(Report& r, const std::string& half, Backend& backend, const std::string& spec, DType dtype,
              const Conversation& c, int rounds) {
  LlamaOptions lo;
  lo.dtype = dtype;
  if (spec.rfind("preset:", 0) == 0) lo.preset_ctx = std::max(c.context(), find_preset(spec.substr(7)).config.n_ctx);
  auto model = load_model(spec, backend, lo);
  MINFER_CHECK(model->info().n_ctx >= c.context(), spec, ": a context of ", model->info().n_ctx,
               " positions is shorter than the conversation's ", c.context());
  // note: the settings alternate, in the order on, off, off, on, on, off, ... (ABBA), so that a
  // machine whose speed drifts moves both alike and neither is always the run that follows the
  // other (the first conversation after a long one ran measurably slower); every TTFT is the
  // median of its turn's rounds.
  std::vector<std::vector<Turn>> on, off;
  for (int round = 0; round < rounds; ++round) {
    for (const bool caching : {round % 2 == 0, round % 2 != 0})
      (caching ? on : off).push_back(converse(*model, c, caching));
  }
  auto median_ttft = [&](const std::vector<std::vector<Turn>>& runs, int64_t t) {
    std::vector<double> v;
    for (const auto& run : runs) v.push_back(run[t].ttft);
    return summarize(v).median;
  };
  std::vector<std::vector<std::string>> rows;
  for (int64_t t = 0; t < c.turns; ++t) {
    const double a = median_ttft(on, t), b = median_ttft(off, t);
    r.point(half, "prompt caching on", double(t + 1), a * 1e3);
    r.point(half, "prompt caching off", double(t + 1), b * 1e3);
    rows.push_back({std::to_string(t + 1), std::to_string(on[0][t].prompt_tokens),
                    std::to_string(on[0][t].cached_tokens), fmt("%.1f", a * 1e3), fmt("%.1f", b * 1e3),
                    fmt("%.2fx", a > 0 ? b / a : 0.0)});
  }
  std::printf("%s: %s (%s weights), %lld turns of %lld new tokens and %lld-token answers, greedy; medians of %d "
              "interleaved round%s\n",
              half.c_str(), spec.c_str(), dtype_name(dtype), static_cast<long long>(c.turns),
              static_cast<long long>(c.message_tokens), static_cast<long long>(c.answer_tokens), rounds,
              rounds == 1 ? "" : "s");
  print_table({"turn", "prompt tokens", "from the cache", "TTFT ms, caching on", "TTFT ms, caching off", "off / on"},
              rows);
  r.ran(half);
  const int64_t last = c.turns - 1;
  const double first_on = median_ttft(on, 0), last_on = median_ttft(on, last), last_off = median_ttft(off, last);
  r.conclude(half, fmt("turn %.0f", double(c.turns)) + fmt(" starts in %.1f ms with prompt caching", last_on * 1e3) +
                       fmt(" and %.1f ms without it", last_off * 1e3) +
                       fmt(" (%.2fx): its prompt is ", last_on > 0 ? last_off / last_on : 0.0) +
                       std::to_string(on[0][last].prompt_tokens) + " tokens, of which the cache held " +
                       std::to_string(on[0][last].cached_tokens) +
                       fmt(". With the cache the last turn's TTFT is %.2fx the first turn's", 
                           first_on > 0 ? last_on / first_on : 0.0) +
                       "; without it, it grows with the history the server prefills again every turn");
}

}  // namespace

void prompt_cache(const Options& o) {
  Report r("prompt-cache", "time to the first token by turn of a conversation, with and without prompt caching");
  Conversation c;
  c.turns = o.quick ? 6 : 20;
  c.message_tokens = o.quick ? 16 : 48;
  c.answer_tokens = o.quick ? 8 : 32;
  auto cpu = cpu_backend(o);
  const int rounds = o.quick ? 1 : 4;
  run_half(r, "cpu", *cpu, o.model_or(o.quick ? "preset:tiny" : "preset:stories15M"), DType::f32, c, rounds);
  if (!o.cuda) {
    r.skipped("cuda", "no CUDA device (" + o.cuda_reason + ")");
  } else {
    auto gpu = cuda_backend();
    run_half(r, "cuda", *gpu, o.model_or("preset:llama-1b"), DType::f16, c, rounds);
  }
  r.axes("turn of the conversation", "time to first token (ms)", false, false);
  r.write(o.out_dir);
}

}  // namespace minfer::demo
