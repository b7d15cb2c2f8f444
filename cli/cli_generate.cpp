// `minfer generate`: text (or token ids) from a prompt, for one sequence or a batch of them.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/decoder.h"
#include "engine/speculative.h"
#include "formats/model_files.h"
#include "core/error.h"
#include "cli/cli_common.h"
#include "cli/cli_sampling.h"
#include "cli/commands.h"

namespace minfer::cli {

namespace {

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  for (int64_t v : parse_int_list(text, "--prompt-ids", 0, INT32_MAX)) ids.push_back(static_cast<int32_t>(v));
  return ids;
}

void print_timing(const char* what, double seconds, int64_t tokens, const char* unit) {
  double ms = seconds * 1e3;
  std::fprintf(stderr, "minfer: %16s = %10.2f ms / %5lld %s (%8.2f ms per token, %9.2f tokens per second)\n",
               what, ms, static_cast<long long>(tokens), unit, tokens > 0 ? ms / double(tokens) : 0.0,
               seconds > 0 ? double(tokens) / seconds : 0.0);
}

std::vector<Option> generate_options() {
  std::vector<Option> options = engine_options();
  options.insert(options.end(), {
      {"-z,--tokenizer", "PATH", "a tokenizer.json, GGUF or llama2.c tokenizer.bin (default: the model's own)"},
      {"-i,--prompt", "TEXT", "the prompt as text (with the special tokens the tokenizer adds: BOS for\n"
                              "                              Llama 2 and 3, as run.c and llama.cpp encode)"},
      {"-f,--file", "PATH", "the prompt as text, from a file (instead of -i)"},
      {"--prompt-ids", "IDS", "the prompt as token ids, e.g. 1,450,4996 (instead of -i)"},
      {"-n,--n-new", "N", "new tokens per sequence after the prompt (default 256)"},
      {"--temp", "T", "temperature >= 0; 0 is greedy, and so is one so small that logits / T\n"
                      "                              overflows float (default 1.0)"},
      {"--top-p", "P", "nucleus sampling threshold in (0, 1]; 1 samples the whole distribution\n"
                       "                              (default 0.9)"},
      {"--seed", "S", "random seed >= 1 (default: from the clock); sequence i uses S + i"},
  });
  const std::vector<Option> sampling = sampling_flag_options();
  options.insert(options.end(), sampling.begin(), sampling.end());
  options.insert(options.end(), {
      {"--batch", "B", "sequences generated together (default 1)"},
      {"--ctx", "N", "positions per sequence (default: what the request needs)"},
      {"--prefill", "MODE", "batched (default) or one-by-one (a forward pass per prompt token)"},
      {"--ignore-eos", "", "keep generating past the model's stop tokens (EOS; BOS or EOS in a\n"
                            "                              llama2.c file, as run.c stops)"},
      {"--print-ids", "", "print only the generated ids, comma-separated, a line per sequence"},
      {"--draft", "MODEL", "speculative decoding: a draft model with the same vocabulary (it may be -m's\n"
                           "                              model itself with a cheaper --draft-dtype), or ngram for\n"
                           "                              prompt lookup (drafts copied from earlier in the context)"},
      {"--draft-dtype", "TYPE", "the draft model's weights, as --dtype takes them (default: as stored)"},
      {"--draft-k", "K", "tokens drafted per round, 1 to 16 (default 4)"},
      {"--ngram", "N", "prompt lookup: the longest suffix looked up, 1 to 16 (default 3)"},
  });
  return options;
}

// What the options ask for, all checked before the model loads (a mistake costs no loading).
struct GenerateRequest {
  bool text_prompt = false;  // -i or -f
  bool ids_prompt = false;   // --prompt-ids
  std::optional<DType> kv_dtype;
  std::unique_ptr<TextTokenizer> tokenizer;  // nullptr: the model carries none and -z is not given
  GenerateOptions gen;
  int64_t batch = 1;
  bool print_ids = false;
  std::string draft;  // empty: no speculation; "ngram": prompt lookup; else the draft model
  std::optional<WeightTypes> draft_dtype;
  SpeculativeOptions speculative;
};

GenerateOptions sampling_options(const Args& args) {
  GenerateOptions gen;
  gen.n_new = args.get_int("-n", 256, 1, 1 << 20);
  gen.temperature = static_cast<float>(args.get_double("--temp", 1.0, 0.0, 1e6));
  gen.top_p = static_cast<float>(args.get_double("--top-p", 0.9, 0.0, 1.0));
  MINFER_CHECK(gen.top_p > 0.0f, "--top-p: ", gen.top_p, " is outside (0, 1]");
  gen.seed = seed_option(args);
  gen.sampling = sampling_flags(args);
  const std::string prefill = args.get("--prefill", "batched");
  MINFER_CHECK(prefill == "batched" || prefill == "one-by-one", "--prefill: '", prefill,
               "' is not batched or one-by-one");
  gen.prefill_one_by_one = prefill == "one-by-one";
  gen.stop_at_eos = !args.has("--ignore-eos");
  return gen;
}

GenerateRequest parse_request(const Args& args) {
  GenerateRequest request;
  request.text_prompt = args.has("-i") || args.has("-f");
  request.ids_prompt = args.has("--prompt-ids");
  MINFER_CHECK(!(request.text_prompt && request.ids_prompt),
               "give the prompt as text (-i, -f) or as --prompt-ids, not both");
  MINFER_CHECK(args.has("-m"), "-m MODEL is required (a model file or folder, or preset:NAME)");
  request.kv_dtype = kv_dtype_option(args);
  request.tokenizer = command_tokenizer(args, args.get("-m"));
  MINFER_CHECK(!request.text_prompt || request.tokenizer,
               "a text prompt (-i, -f) needs a tokenizer: this model carries none, ",
               "give one with -z (a tokenizer.json, or llama2.c's tokenizer.bin)");
  request.gen = sampling_options(args);
  request.batch = args.get_int("--batch", 1, 1, 4096);
  request.print_ids = args.has("--print-ids");
  request.draft = args.get("--draft", "");
  MINFER_CHECK(args.has("--draft") || !(args.has("--draft-k") || args.has("--draft-dtype") || args.has("--ngram")),
               "--draft-k, --draft-dtype and --ngram need --draft MODEL or --draft ngram");
  MINFER_CHECK(!(request.draft == "ngram" && args.has("--draft-dtype")), "--draft-dtype needs a draft model, not ngram");
  MINFER_CHECK(!(request.draft != "ngram" && args.has("--ngram")), "--ngram goes with --draft ngram");
  request.draft_dtype = weights_dtype_option(args, "--draft-dtype");
  request.speculative.k = args.get_int("--draft-k", 4, 1, 16);
  request.speculative.ngram = args.get_int("--ngram", 3, 1, 16);
  MINFER_CHECK(request.draft.empty() || (!request.gen.sampling.cuts() && !request.gen.sampling.processes_logits()),
               "--draft samples with --temp and --top-p only: not with --top-k, --min-p, penalties or --logit-bias");
  MINFER_CHECK(request.draft.empty() || !request.gen.prefill_one_by_one,
               "--draft prefills the prompt in one pass: not with --prefill one-by-one");
  return request;
}

// The prompt as the options give it: -i or -f encoded, or --prompt-ids; empty with neither.
std::vector<int32_t> given_prompt(const Args& args, const GenerateRequest& request) {
  if (request.text_prompt) return request.tokenizer->encode(prompt_text(args), true);
  if (request.ids_prompt) return parse_ids(args.get("--prompt-ids"));
  return {};
}

// No prompt at all: BOS alone, run.c's empty prompt (a model without BOS needs a prompt).
void start_empty_prompt(std::vector<int32_t>* prompt, const GenerateRequest& request, const ModelInfo& info) {
  if (!request.text_prompt && !request.ids_prompt && info.bos_id >= 0) *prompt = {info.bos_id};
  MINFER_CHECK(!prompt->empty(), "the prompt has no tokens",
               info.bos_id < 0 ? " (and this model has no BOS token to start from)" : "");
}

// A cache for `batch` sequences of P prompt tokens and their new ones (--ctx positions when given).
DecoderOptions decoder_options(const Args& args, const GenerateRequest& request, const ModelInfo& info, int64_t P) {
  const int64_t n_new = request.gen.n_new, batch = request.batch;
  check_fits_context(P, n_new, info.n_ctx);
  DecoderOptions dec;
  dec.n_seqs = batch;
  dec.n_ctx = args.has("--ctx") ? args.get_int("--ctx", 0, 1, info.n_ctx) : P + n_new - 1;
  check_fits_context(P, n_new, dec.n_ctx);
  dec.pass_rows = std::min<int64_t>(2048, std::max<int64_t>(P * batch, batch));
  dec.kv_dtype = request.kv_dtype;
  if (!request.draft.empty()) dec.logits_per_seq = request.speculative.k + 1;
  return dec;
}

void print_id_list(const std::vector<int32_t>& ids) {
  for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? "," : "", ids[i]);
}

// One sequence's tokens printed as they arrive: as text with a tokenizer, else as ids separated by commas.
class TokenStream {
 public:
  explicit TokenStream(const TextTokenizer* tokenizer) {
    if (tokenizer) text_ = std::make_unique<TextStream>(*tokenizer);
  }
  void push(int32_t token) {
    if (text_) {
      std::fputs(text_->push(token).c_str(), stdout);
    } else {
      std::printf("%s%d", first_id_ ? "" : ",", token);
      first_id_ = false;
    }
  }
  void finish() {
    if (text_) std::fputs(text_->flush().c_str(), stdout);
    std::printf("\n");
  }

 private:
  std::unique_ptr<TextStream> text_;
  bool first_id_ = true;
};

// Without streaming, each sequence once it is done: its ids alone (--print-ids), or under a heading
// as text (or as ids, without a tokenizer).
void print_sequences(const GenerateResult& result, const GenerateRequest& request) {
  for (int64_t s = 0; s < request.batch; ++s) {
    const auto& ids = result.tokens[s];
    if (!request.print_ids) std::printf("--- sequence %lld ---\n", static_cast<long long>(s));
    if (request.print_ids || !request.tokenizer) {
      print_id_list(ids);
    } else {
      TextStream sequence(*request.tokenizer);
      for (int32_t id : ids) std::fputs(sequence.push(id).c_str(), stdout);
      std::fputs(sequence.flush().c_str(), stdout);
    }
    std::printf("\n");
  }
}

// One sequence without --print-ids streams; otherwise every sequence is printed at the end.
// With `speculative`, it generates (the decoder is its target).
GenerateResult generate_and_print(Decoder& decoder, SpeculativeDecoder* speculative, const std::vector<int32_t>& prompt,
                                  const GenerateRequest& request, int32_t bos_id) {
  const bool stream = !request.print_ids && request.batch == 1;
  TokenStream out(request.tokenizer.get());
  // Streaming echoes the prompt first (without a leading BOS), as run.c and llama.cpp do.
  if (stream)
    for (size_t i = prompt.front() == bos_id ? 1 : 0; i < prompt.size(); ++i) out.push(prompt[i]);
  auto on_token = [&](int64_t, int32_t token) {
    if (!stream) return;
    out.push(token);
    std::fflush(stdout);
  };
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(request.batch), prompt);
  GenerateResult result = speculative ? speculative->generate(prompts, request.gen, on_token)
                                      : decoder.generate(prompts, request.gen, on_token);
  if (stream)
    out.finish();
  else
    print_sequences(result, request);
  std::fflush(stdout);
  return result;
}

// llama.cpp's timing lines, then the counts and the seed (to generate the same again).
void print_summary(const GenerateResult& result, const GenerateRequest& request) {
  int64_t generated = 0;
  for (const auto& t : result.tokens) generated += static_cast<int64_t>(t.size());
  print_timing("prompt eval time", result.prefill_seconds, result.prompt_tokens, "tokens");
  print_timing("eval time", result.decode_seconds, result.decode_tokens, "tokens");
  std::fprintf(stderr, "minfer: %lld prompt tokens, %lld generated tokens, %lld sequences, seed %llu%s\n",
               static_cast<long long>(result.prompt_tokens), static_cast<long long>(generated),
               static_cast<long long>(request.batch), static_cast<unsigned long long>(request.gen.seed),
               request.gen.temperature == 0.0f ? " (greedy)" : "");
  if (request.draft.empty()) return;
  std::fprintf(stderr,
               "minfer: speculative (%s, k = %lld): %lld target passes for %lld tokens (%.2f per pass), "
               "%lld of %lld drafts accepted (%.1f%%), %lld draft passes\n",
               request.draft == "ngram" ? "prompt lookup" : "draft model",
               static_cast<long long>(request.speculative.k), static_cast<long long>(result.decode_steps),
               static_cast<long long>(result.decode_tokens),
               result.decode_steps > 0 ? double(result.decode_tokens) / double(result.decode_steps) : 0.0,
               static_cast<long long>(result.accepted_tokens), static_cast<long long>(result.drafted_tokens),
               result.drafted_tokens > 0 ? 100.0 * double(result.accepted_tokens) / double(result.drafted_tokens) : 0.0,
               static_cast<long long>(result.draft_passes));
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  Args args("generate", "Generates text from a prompt with a model (Hugging Face, GGUF, llama2.c) or a preset.",
            generate_options());
  args.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::printf("%s", args.usage().c_str());
    return 0;
  }
  const GenerateRequest request = parse_request(args);
  std::vector<int32_t> prompt = given_prompt(args, request);

  Engine engine = load_engine(args, args.get("-m"));
  const ModelInfo& info = engine.model->info();
  if (request.tokenizer)
    check_tokenizer_fits(*request.tokenizer, info, args.has("-z") ? args.get("-z") : args.get("-m"));
  start_empty_prompt(&prompt, request, info);
  const DecoderOptions target_options = decoder_options(args, request, info, static_cast<int64_t>(prompt.size()));
  Decoder decoder(*engine.model, target_options);
  std::fprintf(stderr, "minfer: KV cache %s (%s, %lld sequences x %lld positions)\n",
               format_bytes(decoder.cache().bytes()).c_str(), dtype_name(decoder.cache().dtype()),
               static_cast<long long>(request.batch), static_cast<long long>(decoder.n_ctx()));

  std::unique_ptr<LlamaModel> draft_model;
  std::unique_ptr<Decoder> draft_decoder;
  std::unique_ptr<SpeculativeDecoder> speculative;
  if (!request.draft.empty()) {
    if (request.draft != "ngram") {
      LlamaOptions options = llama_options(args);
      options.dtype = request.draft_dtype;
      draft_model = load_draft_model(request.draft, options, *engine.backend, info);
      draft_decoder = std::make_unique<Decoder>(*draft_model, draft_decoder_options(target_options));
    }
    speculative = std::make_unique<SpeculativeDecoder>(decoder, draft_decoder.get(), request.speculative);
  }
  const GenerateResult result = generate_and_print(decoder, speculative.get(), prompt, request, info.bos_id);
  print_summary(result, request);
  return 0;
}

}  // namespace minfer::cli
