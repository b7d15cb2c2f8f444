// `minfer naive`: text from the one-page forward pass (model/naive_llama.h), as run.c makes it:
// one sequence, one token per forward pass (the prompt's too), the engine's sampler. Slow by
// design: it is the reference the engine is held to, made runnable. A command of its own rather
// than a --device, because the page has no backend: no batch, no threads, nothing to configure.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "core/clock.h"
#include "core/error.h"
#include "engine/decoder.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "formats/model_files.h"
#include "model/naive_llama.h"

namespace minfer::cli {

namespace {

std::vector<Option> naive_options() {
  return {
      {"-m,--model", "PATH", "a model file or folder (llama2.c, GGUF, Hugging Face); not a preset"},
      {"-z,--tokenizer", "PATH", "a tokenizer.json, GGUF or llama2.c tokenizer.bin (default: the model's own)"},
      {"-i,--prompt", "TEXT", "the prompt as text"},
      {"-f,--file", "PATH", "the prompt as text, from a file (instead of -i)"},
      {"--prompt-ids", "IDS", "the prompt as token ids, e.g. 1,450,4996 (instead of -i)"},
      {"-n,--n-new", "N", "new tokens after the prompt (default 64)"},
      {"--temp", "T", "temperature >= 0; 0 is greedy (default 0)"},
      {"--top-p", "P", "nucleus sampling threshold in (0, 1] (default 0.9)"},
      {"--seed", "S", "random seed >= 1 (default 1); the same tokens as generate --seed S"},
      {"--ignore-eos", "", "keep generating past the model's stop tokens"},
      {"--print-ids", "", "print only the generated ids, comma-separated"},
  };
}

// What the options ask for, all checked before the model loads.
struct NaiveRequest {
  std::string spec;          // -m
  bool text_prompt = false;  // -i or -f
  std::unique_ptr<TextTokenizer> tokenizer;  // nullptr: the model carries none and -z is not given
  int64_t n_new = 0;
  float temperature = 0.0f, top_p = 0.0f;
  uint64_t seed = 1;
  bool stop_at_eos = true;
};

NaiveRequest parse_request(const Args& args) {
  NaiveRequest request;
  MINFER_CHECK(args.has("-m"), "-m MODEL is required (a model file or folder)");
  request.spec = args.get("-m");
  const std::string& spec = request.spec;
  MINFER_CHECK(spec.rfind("preset:", 0) != 0, spec, ": presets are generated on a backend; naive reads model files ",
               "(write one with make-model, or run the preset with generate --device ref)");
  request.text_prompt = args.has("-i") || args.has("-f");
  MINFER_CHECK(!(request.text_prompt && args.has("--prompt-ids")),
               "give the prompt as text (-i, -f) or as --prompt-ids, not both");
  request.tokenizer = command_tokenizer(args, spec);
  MINFER_CHECK(!request.text_prompt || request.tokenizer,
               "a text prompt (-i, -f) needs a tokenizer: this model carries none, give one with -z");
  request.n_new = args.get_int("-n", 64, 1, 1 << 20);
  request.temperature = static_cast<float>(args.get_double("--temp", 0.0, 0.0, 1e6));
  request.top_p = static_cast<float>(args.get_double("--top-p", 0.9, 0.0, 1.0));
  MINFER_CHECK(request.top_p > 0.0f, "--top-p: ", request.top_p, " is outside (0, 1]");
  request.seed = static_cast<uint64_t>(args.get_int("--seed", 1, 1, INT64_MAX));
  request.stop_at_eos = !args.has("--ignore-eos");
  return request;
}

// The prompt's tokens: -i or -f encoded, or --prompt-ids; with neither, BOS alone (run.c's empty prompt).
std::vector<int32_t> naive_prompt(const Args& args, const NaiveRequest& request, const LlamaConfig& config) {
  std::vector<int32_t> prompt;
  if (request.text_prompt) prompt = request.tokenizer->encode(prompt_text(args), true);
  if (args.has("--prompt-ids"))
    for (int64_t id : parse_int_list(args.get("--prompt-ids"), "--prompt-ids", 0, config.vocab_size - 1))
      prompt.push_back(static_cast<int32_t>(id));
  if (prompt.empty() && config.bos_id >= 0) prompt = {config.bos_id};
  MINFER_CHECK(!prompt.empty(), "the prompt has no tokens (and this model has no BOS token to start from)");
  return prompt;
}

struct NaiveRun {
  std::vector<int32_t> generated;  // without the stop token
  double seconds = 0.0;            // every forward pass, the prompt's too
};

// run.c's loop: a forward pass per position; while reading the prompt the next token is the
// prompt's, after it the sampler's. New tokens go to `text` as they come, when it is given.
NaiveRun run_naive(NaiveLlama& model, const std::vector<int32_t>& prompt, const NaiveRequest& request,
                   const LlamaConfig& config, TextStream* text) {
  Sampler sampler(config.vocab_size, request.temperature, request.top_p, request.seed);
  std::vector<float> logits(static_cast<size_t>(config.vocab_size));
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  NaiveRun run;
  const double start = now_seconds();
  int32_t token = prompt[0];
  for (int64_t pos = 0; pos + 1 < n_prompt + request.n_new; ++pos) {
    const std::vector<float>& out = model.forward(token, pos);
    if (pos + 1 < n_prompt) {  // still reading the prompt
      token = prompt[static_cast<size_t>(pos + 1)];
      continue;
    }
    logits.assign(out.begin(), out.end());
    token = sampler.sample(logits.data());
    if (request.stop_at_eos && is_stop_token(config.stop_ids, token)) break;
    run.generated.push_back(token);
    if (text) {
      std::fputs(text->push(token).c_str(), stdout);
      std::fflush(stdout);
    }
  }
  run.seconds = now_seconds() - start;
  return run;
}

}  // namespace

int cmd_naive(int argc, char** argv) {
  Args args("naive", "Generates text with the one-page forward pass (model/naive_llama.h): run.c's loop, slowly.",
            naive_options());
  args.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::printf("%s", args.usage().c_str());
    return 0;
  }
  const NaiveRequest request = parse_request(args);

  const LlamaHostWeights weights = load_model_weights(request.spec);
  const LlamaConfig& config = weights.config;
  const std::vector<int32_t> prompt = naive_prompt(args, request, config);
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  check_fits_context(n_prompt, request.n_new, config.n_ctx);
  NaiveLlama model(weights, n_prompt + request.n_new - 1);
  std::fprintf(stderr, "minfer: naive forward of %s (%s), f32 on one thread\n", request.spec.c_str(),
               config.describe().c_str());

  // Text streams, after the prompt (without a leading BOS); ids are printed at the end.
  const bool print_ids = args.has("--print-ids") || !request.tokenizer;
  std::unique_ptr<TextStream> text;
  if (!print_ids) {
    text = std::make_unique<TextStream>(*request.tokenizer);
    for (size_t i = prompt.front() == config.bos_id ? 1 : 0; i < prompt.size(); ++i)
      std::fputs(text->push(prompt[i]).c_str(), stdout);
  }
  const NaiveRun run = run_naive(model, prompt, request, config, text.get());
  if (text) std::printf("%s\n", text->flush().c_str());
  for (size_t i = 0; print_ids && i < run.generated.size(); ++i) std::printf("%s%d", i ? "," : "", run.generated[i]);
  if (print_ids) std::printf("\n");
  std::fprintf(stderr, "minfer: %lld prompt tokens, %lld generated, %.2f tokens per second (all forward passes)\n",
               static_cast<long long>(n_prompt), static_cast<long long>(run.generated.size()),
               double(n_prompt + int64_t(run.generated.size())) / std::max(run.seconds, 1e-9));
  return 0;
}

}  // namespace minfer::cli
