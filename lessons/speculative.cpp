// demo speculative: the sequential-decoding tax, attacked. A decode step reads every weight for
// one token; a pass over k + 1 rows of the same sequence reads them once too and costs little
// more. Speculative decoding (engine/speculative.h) fills those rows with guesses: a drafter
// proposes k tokens, the target checks them in one pass, and each accepted guess is a decode step
// saved, with the target's greedy output unchanged.
//
// Against k = 1 .. 8 the lesson measures, for the model (-m, default a preset) with
//   (a) its own weights in q8_0 as the draft model (self-speculation by quantization),
//   (b) prompt lookup on a copy-heavy prompt (a paragraph, then the request to repeat it), and
//   (c) prompt lookup on free text,
// the acceptance rate, tokens per target pass and decode tokens/s against plain decoding; and it
// sets beside (a) what Leviathan's formula predicts from the measured acceptance rate and the
// measured costs of a draft step and a verify pass (expected_speedup). A model with random weights
// (the presets) neither copies its prompt nor says anything a draft predicts well: the lesson is
// meant for a trained model (`-m` SmolLM2-135M-Instruct in f32, bench/results/NOTES.md).
#include <algorithm>
#include <memory>

#include "core/error.h"
#include "engine/decoder.h"
#include "engine/speculative.h"
#include "formats/model_files.h"
#include "lessons/demos.h"
#include "model/llama.h"

namespace minfer::demo {

namespace {

const char* kParagraph =
    "The lighthouse keeper climbed the hundred steps every evening at dusk. He cleaned the great lens, "
    "trimmed the wick, and wrote the weather in a small book with a green cover.";

struct Prompts {
  std::vector<int32_t> copy, free;
};

// Text prompts when the model carries a tokenizer; otherwise id prompts of the same shape (a
// 40-token "paragraph" said twice and begun a third time, and a short opening).
Prompts lesson_prompts(const std::string& spec, const ModelInfo& info) {
  std::unique_ptr<TextTokenizer> tokenizer;
  if (spec.rfind("preset:", 0) != 0) tokenizer = load_model_tokenizer(spec);
  Prompts p;
  if (tokenizer) {
    p.copy = tokenizer->encode(std::string("Repeat the text exactly.\n\nText: ") + kParagraph + "\n\nRepeat: ", true);
    p.free = tokenizer->encode("Once upon a time, in a village by the sea,", true);
    return p;
  }
  const int32_t bos = std::max(info.bos_id, 0);
  std::vector<int32_t> paragraph;
  for (int i = 0; i < 40; ++i) paragraph.push_back(int32_t(3 + (i * 131 + 7) % (info.vocab_size - 3)));
  p.copy = {bos};
  for (int r = 0; r < 2; ++r) p.copy.insert(p.copy.end(), paragraph.begin(), paragraph.end());
  p.copy.insert(p.copy.end(), paragraph.begin(), paragraph.begin() + 4);
  p.free = {bos, 3, 17, 29};
  return p;
}

struct Run {
  double tokens_per_second = 0, acceptance = 0, tokens_per_pass = 0;
};

// Median over `reps` runs of greedy generation of n_new tokens after `prompt`; with `speculative`
// through it, else plain decoding.
Run measure(Decoder& target, SpeculativeDecoder* speculative, const std::vector<int32_t>& prompt, int64_t n_new, int reps,
            bool stop_at_eos = false) {
  GenerateOptions gen;
  gen.n_new = n_new;
  gen.stop_at_eos = stop_at_eos;
  std::vector<double> rates;
  Run run;
  for (int i = 0; i < reps; ++i) {
    const GenerateResult r = speculative ? speculative->generate({prompt}, gen) : target.generate({prompt}, gen);
    MINFER_CHECK(r.decode_tokens > 0 && r.decode_seconds > 0, "demo speculative: the model stopped after its first token");
    rates.push_back(double(r.decode_tokens) / r.decode_seconds);
    run.acceptance = r.drafted_tokens > 0 ? double(r.accepted_tokens) / double(r.drafted_tokens) : 0.0;
    run.tokens_per_pass = double(r.decode_tokens) / double(std::max<int64_t>(r.decode_steps, 1));
  }
  std::sort(rates.begin(), rates.end());
  run.tokens_per_second = rates[rates.size() / 2];
  return run;
}

// Seconds of one forward pass over `rows` rows of one sequence at position `at` (median).
double pass_seconds(Decoder& decoder, Backend& backend, const std::vector<int32_t>& prompt, int64_t rows, int reps) {
  decoder.reset();
  decoder.prefill({prompt});
  const int64_t at = decoder.position(0);
  std::vector<int32_t> tokens(size_t(rows), prompt.back());
  std::vector<int32_t> ids;
  return median_seconds(reps, [&] {
    decoder.forward_chunks({{0, tokens.data(), rows, true, true}});
    decoder.argmax_rows(rows, &ids);
    decoder.rewind(0, at);
  }, [&] { backend.synchronize(); });
}

void run_half(Report& r, const std::string& half, Backend& backend, const std::string& spec, DType target_dtype,
              const std::vector<int64_t>& ks, int64_t n_new, int reps) {
  LlamaOptions target_options, draft_options;
  target_options.dtype = target_dtype;
  draft_options.dtype = DType::q8_0;
  auto target = load_model(spec, backend, target_options);
  auto draft = load_model(spec, backend, draft_options);
  const Prompts prompts = lesson_prompts(spec, target->info());
  const int64_t k_max = ks.back();
  DecoderOptions options;
  options.n_ctx = int64_t(std::max(prompts.copy.size(), prompts.free.size())) + n_new + k_max;
  options.logits_per_seq = k_max + 1;
  Decoder target_decoder(*target, options);
  Decoder draft_decoder(*draft, draft_decoder_options(options));

  const double step = pass_seconds(target_decoder, backend, prompts.free, 1, reps * 4);
  const double draft_cost = pass_seconds(draft_decoder, backend, prompts.free, 1, reps * 4) / step;
  std::vector<std::vector<std::string>> rows;
  std::vector<double> self_speedups, copy_speedups, verify_costs;
  for (int64_t k : ks) {
    SpeculativeOptions so;
    so.k = k;
    SpeculativeDecoder self(target_decoder, &draft_decoder, so), lookup(target_decoder, nullptr, so);
    // Plain decoding again beside every k: a shared machine drifts, and each ratio is taken
    // within one k's measurements. The copy ends where the model ends its answer (a stop token).
    const Run plain = measure(target_decoder, nullptr, prompts.free, n_new, reps);
    const Run plain_copy = measure(target_decoder, nullptr, prompts.copy, n_new, reps, true);
    const Run a = measure(target_decoder, &self, prompts.free, n_new, reps);
    const Run b = measure(target_decoder, &lookup, prompts.copy, n_new, reps, true);
    const Run c = measure(target_decoder, &lookup, prompts.free, n_new, reps);
    const double verify_cost = pass_seconds(target_decoder, backend, prompts.free, k + 1, reps * 4) / step;
    const double predicted = expected_speedup(a.acceptance, k, draft_cost, verify_cost);
    self_speedups.push_back(a.tokens_per_second / plain.tokens_per_second);
    copy_speedups.push_back(b.tokens_per_second / plain_copy.tokens_per_second);
    verify_costs.push_back(verify_cost);
    r.point(half, "q8_0 self-draft", double(k), a.tokens_per_second);
    r.point(half, "predicted (Leviathan)", double(k), predicted * plain.tokens_per_second);
    r.point(half, "prompt lookup, copying", double(k), b.tokens_per_second);
    r.point(half, "prompt lookup, free text", double(k), c.tokens_per_second);
    r.point(half, "plain decoding", double(k), plain.tokens_per_second);
    rows.push_back({std::to_string(k), fmt("%.0f%%", 100 * a.acceptance), fmt("%.2f", a.tokens_per_pass),
                    fmt("%.2f", verify_cost), fmt("%.2fx", a.tokens_per_second / plain.tokens_per_second),
                    fmt("%.2fx", predicted), fmt("%.0f%%", 100 * b.acceptance),
                    fmt("%.2fx", b.tokens_per_second / plain_copy.tokens_per_second), fmt("%.0f%%", 100 * c.acceptance),
                    fmt("%.2fx", c.tokens_per_second / plain.tokens_per_second)});
  }
  std::printf("%s: %s, %s target, q8_0 draft (a draft step costs %.2f of a decode step); speed-ups against plain\n"
              "decoding measured beside each k\n",
              half.c_str(), spec.c_str(), dtype_name(target_dtype), draft_cost);
  print_table({"k", "self: accepted", "tokens/pass", "verify cost", "speed-up", "predicted", "copy: accepted",
               "speed-up", "free: accepted", "speed-up"},
              rows);
  r.ran(half);
  const size_t best = size_t(std::max_element(self_speedups.begin(), self_speedups.end()) - self_speedups.begin());
  const size_t best_copy = size_t(std::max_element(copy_speedups.begin(), copy_speedups.end()) - copy_speedups.begin());
  r.conclude(half, fmt("a q8_0 copy of the model as its own draft decodes %.2fx as fast as plain decoding", self_speedups[best]) +
                       " at k = " + std::to_string(ks[best]) + ", with the same greedy tokens, and prompt lookup" +
                       fmt(" %.2fx on the copying prompt", copy_speedups[best_copy]) + " at k = " +
                       std::to_string(ks[best_copy]) +
                       fmt("; a verify pass of 2 rows costs %.2f decode steps", verify_costs[0]) +
                       fmt(" and one of %.0f rows ", double(ks.back() + 1)) + fmt("%.2f", verify_costs.back()) +
                       ": what each round's accepted guesses must earn back");
}

}  // namespace

void speculative(const Options& o) {
  Report r("speculative", "speculative decoding: decode tokens/s against tokens drafted per round");
  const std::string spec = o.model_or(o.quick ? "preset:tiny" : "preset:stories42M");
  const std::vector<int64_t> ks = o.quick ? std::vector<int64_t>{1, 2, 4} : std::vector<int64_t>{1, 2, 3, 4, 5, 6, 8};
  auto cpu = cpu_backend(o);
  run_half(r, "cpu", *cpu, spec, DType::f32, ks, o.quick ? 48 : 128, o.quick ? 1 : 3);
  if (!o.cuda) {
    r.skipped("cuda", "no CUDA device (" + o.cuda_reason + ")");
  } else {
    auto gpu = cuda_backend();
    run_half(r, "cuda", *gpu, o.model_or("preset:llama-1b"), DType::f16, ks, 128, 3);
  }
  r.axes("tokens drafted per round (k)", "decode tokens/s", false, false);
  r.write(o.out_dir);
}

}  // namespace minfer::demo
