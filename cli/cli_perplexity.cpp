// `minfer perplexity`: how well a model predicts a text, and how far a dtype moves it from a base
// dtype (KL divergence, top-1 agreement), by llama.cpp's method (engine/perplexity.h).
#include <cctype>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "engine/perplexity.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "formats/model_files.h"

namespace minfer::cli {

namespace {

// Token ids separated by commas and/or white space, each in [0, vocab).
std::vector<int32_t> parse_ids_file(const std::string& path, int64_t vocab) {
  const std::string text = InputFile(path, "ids file").read_all(uint64_t(256) << 20);
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == ',' || std::isspace(c)) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && text[end] != ',' && !std::isspace(static_cast<unsigned char>(text[end]))) ++end;
    const std::string word = text.substr(i, end - i);
    const int64_t id = parse_int(word, path + ": token " + std::to_string(ids.size()), 0, vocab - 1);
    ids.push_back(static_cast<int32_t>(id));
    i = end;
  }
  MINFER_CHECK(!ids.empty(), path, ": no token ids");
  return ids;
}

std::vector<Option> perplexity_options() {
  std::vector<Option> options = engine_options();
  options.insert(options.end(), {
      {"-z,--tokenizer", "PATH", "a tokenizer.json, GGUF or llama2.c tokenizer.bin (default: the model's own)"},
      {"-f,--file", "PATH", "the text to score"},
      {"-i,--prompt", "TEXT", "the text to score, inline (instead of -f)"},
      {"--ids", "PATH", "the tokens to score: a file of ids separated by commas or white space"},
      {"-c,--ctx", "N", "window length in tokens, at least 4 (default: 512 or the model's context)"},
      {"--chunks", "N", "score at most N windows (default: all)"},
      {"--kl-base-model", "MODEL", "the same against another file, as it is stored (e.g. the F32 GGUF a Q4_K_M\n"
                                  "                              file was quantized from)"},
      {"--kl-base", "TYPE", "also run the model in dtype TYPE (f32, f16, bf16, q8_0) and report the KL\n"
                            "                              divergence of --dtype's predictions from it"},
      {"--no-bos", "", "keep each window's own first token (by default it is BOS where the model's\n"
                       "                              tokenizer puts BOS before a text, as llama-perplexity does)"},
      {"--bos", "", "make each window's first token BOS even where the model puts none before a text"},
      {"-o,--output", "FMT", "md or json (default md)"},
  });
  return options;
}

// What the options ask for, all checked before the model loads.
struct PerplexityRequest {
  bool text = false;  // -f or -i; otherwise --ids
  std::optional<DType> kv_dtype;
  std::unique_ptr<TextTokenizer> tokenizer;  // -z or the model's own; nullptr when there is none
  std::string output;                        // md or json
  std::optional<DType> base_dtype;           // --kl-base
  std::string base_model;                    // --kl-base-model
  int64_t max_windows = 0;
};

PerplexityRequest parse_request(const Args& args) {
  PerplexityRequest request;
  request.text = args.has("-f") || args.has("-i");
  MINFER_CHECK(request.text != args.has("--ids"),
               "give the tokens as text (-f FILE or -i TEXT) or as --ids FILE, one of them");
  MINFER_CHECK(args.has("-m"), "-m MODEL is required (a model file or folder, or preset:NAME)");
  request.kv_dtype = kv_dtype_option(args);
  request.tokenizer = command_tokenizer(args, args.get("-m"));
  MINFER_CHECK(!request.text || request.tokenizer,
               "text (-f, -i) needs a tokenizer: this model carries none, give one with -z");
  request.output = args.get("-o", "md");
  MINFER_CHECK(request.output == "md" || request.output == "json", "-o: '", request.output, "' is not md or json");
  if (args.has("--kl-base")) {
    request.base_dtype = parse_dtype(args.get("--kl-base").c_str());
    MINFER_CHECK(*request.base_dtype != DType::i32, "--kl-base: i32 is not a weights type");
  }
  if (args.has("--kl-base-model")) {
    MINFER_CHECK(!request.base_dtype, "--kl-base and --kl-base-model: give one base");
    request.base_model = args.get("--kl-base-model");
  }
  request.max_windows = args.get_int("--chunks", 0, 1, int64_t(1) << 30);
  return request;
}

// The same model in --kl-base's dtype, or --kl-base-model's file as it is stored, on the engine's
// backend; nullptr without either.
std::unique_ptr<LlamaModel> load_base_model(const Args& args, const Engine& engine, const PerplexityRequest& request) {
  if (!request.base_dtype && request.base_model.empty()) return nullptr;
  LlamaOptions base_options = llama_options(args);
  base_options.dtype = request.base_dtype;
  std::unique_ptr<LlamaModel> base =
      load_model(request.base_model.empty() ? args.get("-m") : request.base_model, *engine.backend, base_options);
  describe_model(*base, *engine.backend, "base model");
  return base;
}

std::vector<int32_t> scored_tokens(const Args& args, const PerplexityRequest& request, const ModelInfo& info) {
  if (!request.text) return parse_ids_file(args.get("--ids"), info.vocab_size);
  check_tokenizer_fits(*request.tokenizer, info, args.has("-z") ? args.get("-z") : args.get("-m"));
  return request.tokenizer->encode(prompt_text(args), true);
}

// Whether the model puts BOS before a text, as llama-perplexity asks (llama_vocab_get_add_bos): its
// tokenizer does when encoding a text with its special tokens; a model without a tokenizer (a
// llama2.c checkpoint scored by --ids) does when it has BOS, as run.c.
bool model_adds_bos(const TextTokenizer* tokenizer, const ModelInfo& info) {
  if (info.bos_id < 0) return false;
  if (tokenizer == nullptr) return true;
  const std::vector<int32_t> ids = tokenizer->encode("", true);
  return !ids.empty() && ids.front() == info.bos_id;
}

PerplexityOptions window_options(const Args& args, const PerplexityRequest& request, const ModelInfo& info) {
  PerplexityOptions ppl;
  ppl.n_ctx = args.has("-c") ? args.get_int("-c", 0, 4, info.n_ctx) : std::min<int64_t>(512, info.n_ctx);
  ppl.max_windows = request.max_windows;
  ppl.kv_dtype = request.kv_dtype;
  MINFER_CHECK(!(args.has("--bos") && args.has("--no-bos")), "--bos and --no-bos: give one");
  MINFER_CHECK(!args.has("--bos") || info.bos_id >= 0, "--bos: this model has no BOS token");
  const bool bos = args.has("--bos") || (!args.has("--no-bos") && model_adds_bos(request.tokenizer.get(), info));
  if (bos) ppl.bos = info.bos_id;
  return ppl;
}

// Scores the windows, with llama.cpp's progress on stderr: the perplexity so far after each window.
PerplexityResult score(LlamaModel& model, LlamaModel* base, const std::vector<int32_t>& tokens,
                       const PerplexityOptions& ppl) {
  std::fprintf(stderr, "minfer: %zu tokens, windows of %lld, scoring the last %lld predictions of each\n",
               tokens.size(), static_cast<long long>(ppl.n_ctx), static_cast<long long>(ppl.n_ctx - 1 - ppl.n_ctx / 2));
  PerplexityResult r = perplexity(model, base, tokens, ppl, [](int64_t done, int64_t, double so_far) {
    std::fprintf(stderr, "[%lld]%.4f,", static_cast<long long>(done), so_far);
    std::fflush(stderr);
  });
  std::fprintf(stderr, "\nminfer: %lld windows in %.2f s (%.1f tokens per second)\n",
               static_cast<long long>(r.n_windows), r.seconds,
               r.seconds > 0 ? double(r.n_windows * ppl.n_ctx) / r.seconds : 0.0);
  return r;
}

void print_json(const ModelInfo& info, int64_t n_ctx, const PerplexityResult& r, std::optional<DType> base_dtype) {
  nlohmann::ordered_json j;
  j["model"] = info.name;
  j["dtype"] = dtype_name(info.dtype);
  j["n_ctx"] = n_ctx;
  j["n_windows"] = r.n_windows;
  j["n_tokens"] = r.n_tokens;
  j["ppl"] = r.ppl;
  j["ppl_error"] = r.ppl_error;
  if (r.kl) {
    j["base_dtype"] = dtype_name(*base_dtype);
    j["base_ppl"] = r.kl->base_ppl;
    j["kl_mean"] = r.kl->kl_mean;
    j["kl_p99"] = r.kl->kl_p99;
    j["kl_max"] = r.kl->kl_max;
    j["top1_agreement"] = r.kl->top1_agreement;
  }
  j["seconds"] = r.seconds;
  std::printf("%s\n", j.dump(2).c_str());
}

// A Markdown table of one row, with the KL columns when there is a base model.
void print_markdown(const ModelInfo& info, int64_t n_ctx, const PerplexityResult& r, std::optional<DType> base_dtype) {
  std::printf("| model | dtype | windows x ctx | scored tokens | PPL |");
  if (r.kl) std::printf(" base | base PPL | mean KL | KL p99 | top-1 agreement |");
  std::printf("\n|---|---|---|---|---|%s\n", r.kl ? "---|---|---|---|---|" : "");
  std::printf("| %s | %s | %lld x %lld | %lld | %.4f +/- %.4f |", info.name.c_str(), dtype_name(info.dtype),
              static_cast<long long>(r.n_windows), static_cast<long long>(n_ctx), static_cast<long long>(r.n_tokens),
              r.ppl, r.ppl_error);
  if (r.kl)
    std::printf(" %s | %.4f | %.6f | %.6f | %.2f%% |", dtype_name(*base_dtype), r.kl->base_ppl, r.kl->kl_mean,
                r.kl->kl_p99, 100.0 * r.kl->top1_agreement);
  std::printf("\n");
}

}  // namespace

int cmd_perplexity(int argc, char** argv) {
  Args args("perplexity",
            "Perplexity over a text in windows of the context, scoring each window's second half (as\n"
            "llama.cpp's llama-perplexity does), and with --kl-base the KL divergence and top-1 agreement\n"
            "against the model in another dtype.",
            perplexity_options());
  args.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::printf("%s", args.usage().c_str());
    return 0;
  }
  const PerplexityRequest request = parse_request(args);

  Engine engine = load_engine(args, args.get("-m"));
  const ModelInfo& info = engine.model->info();
  const std::unique_ptr<LlamaModel> base = load_base_model(args, engine, request);
  const std::vector<int32_t> tokens = scored_tokens(args, request, info);
  const PerplexityOptions ppl = window_options(args, request, info);
  const PerplexityResult r = score(*engine.model, base.get(), tokens, ppl);
  if (request.output == "json")
    print_json(info, ppl.n_ctx, r, request.base_dtype);
  else
    print_markdown(info, ppl.n_ctx, r, request.base_dtype);
  return 0;
}

}  // namespace minfer::cli
