// `minfer chat`: a conversation with an instruct model in the terminal, in the model's own chat
// template (tokenizers/chat_format.h), the answer streamed as it is generated.
//
// The KV cache outlives the turns. Every turn renders the whole conversation, as any chat client
// sends it, and compares its tokens with those whose keys and values the cache holds: the cache
// is rewound to the first token where they differ (Decoder::rewind; usually the end of the last
// answer) and only the rest is prefilled: the end of the last turn, the new message and the
// assistant's header. Without this, turn 20 would prefill the nineteen turns before it again.
// --verbose prints, per turn, what was prefilled, what the cache held and the time to the first
// token.
//
// Ctrl-C while an answer streams stops that answer (what was said stays in the conversation);
// at the prompt it clears the line. /exit or Ctrl-D ends the chat.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/error.h"
#include "engine/decoder.h"
#include "engine/sampler.h"
#include "tokenizers/chat_format.h"
#include "cli/cli_common.h"
#include "cli/cli_ranks.h"
#include "cli/cli_sampling.h"
#include "cli/commands.h"

namespace minfer::cli {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;

void on_sigint(int) { g_interrupted = 1; }

// SIGINT sets a flag instead of ending the process; without SA_RESTART, so that a read waiting
// at the prompt returns (EINTR) and the line can be cleared.
void catch_sigint() {
  struct sigaction action = {};
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;
  sigaction(SIGINT, &action, nullptr);
}

std::vector<Option> chat_options() {
  std::vector<Option> options = engine_options();
  options.insert(options.end(), {
      {"-z,--tokenizer", "PATH", "a tokenizer.json or GGUF file (default: the model's own)"},
      {"--chat-template", "NAME", "chatml, llama2, llama3, mistral, zephyr, gemma or phi3 (default: the\n"
                                  "                              template the model carries)"},
      {"--system", "TEXT", "the system message, kept at the start of the conversation"},
      {"-n,--n-new", "N", "the longest answer in tokens (default: until the context is full)"},
      {"--ctx", "N", "positions of the conversation (default: the model's context, at most 4096)"},
      {"--temp", "T", "temperature >= 0; 0 is greedy (default 0.8)"},
      {"--top-p", "P", "nucleus sampling threshold in (0, 1] (default 0.95)"},
      {"--seed", "S", "random seed >= 1 (default: from the clock)"},
  });
  const std::vector<Option> sampling = sampling_flag_options();
  options.insert(options.end(), sampling.begin(), sampling.end());
  options.insert(options.end(), {
      {"--verbose", "", "per turn: tokens prefilled, tokens the cache held, time to the first token"},
  });
  return options;
}

// One line from the terminal (without its newline). False at the end of input; *interrupted
// when Ctrl-C arrived while waiting.
bool read_line(std::string* line, bool* interrupted) {
  line->clear();
  *interrupted = false;
  for (;;) {
    const int c = std::fgetc(stdin);
    if (c == EOF) {
      if (std::ferror(stdin) && errno == EINTR && g_interrupted) {
        std::clearerr(stdin);
        g_interrupted = 0;
        *interrupted = true;
        return true;
      }
      return !line->empty();
    }
    if (c == '\n') return true;
    *line += static_cast<char>(c);
  }
}

// The options, read (and checked) before the model loads.
struct ChatSettings {
  float temperature, top_p;
  SamplingOptions sampling;  // the penalties count each answer's tokens; repetition's the conversation's too
  uint64_t seed;
  int64_t max_answer;  // 0: until the context is full
  std::optional<int64_t> n_ctx;
  bool verbose;
  std::string system;
};

ChatSettings chat_settings(const Args& args) {
  ChatSettings s;
  s.temperature = static_cast<float>(args.get_double("--temp", 0.8, 0.0, 1e6));
  s.top_p = static_cast<float>(args.get_double("--top-p", 0.95, 0.0, 1.0));
  MINFER_CHECK(s.top_p > 0.0f, "--top-p: ", s.top_p, " is outside (0, 1]");
  s.seed = seed_option(args);
  s.sampling = sampling_flags(args);
  s.max_answer = args.has("-n") ? args.get_int("-n", 0, 1, 1 << 20) : 0;
  if (args.has("--ctx")) s.n_ctx = args.get_int("--ctx", 0, 2, 1 << 20);
  s.verbose = args.has("--verbose");
  s.system = args.get("--system", "");
  return s;
}

class ChatSession {
 public:
  ChatSession(LlamaModel& model, const TextTokenizer& tokenizer, const ChatFormat& format, const ChatSettings& s)
      : tokenizer_(tokenizer), format_(format), decoder_(model, decoder_options(model.info(), s)),
        sampler_(model.info().vocab_size, s.temperature, s.top_p, s.seed), stop_ids_(model.info().stop_ids),
        max_answer_(s.max_answer), verbose_(s.verbose), system_(s.system) {
    sampler_.restart(s.temperature, s.top_p, s.seed, s.sampling);
    for (int32_t id : format_.end_of_turn_ids()) stop_ids_.push_back(id);
    history_.reserve(static_cast<size_t>(decoder_.n_ctx()));
    reset();
    // A template that refuses a system message (gemma-it, Mistral v0.1 and v0.2) says so now, once.
    std::vector<ChatMessage> first_turn = messages_;
    first_turn.push_back({"user", "hello"});
    format_.encode(first_turn, true);
  }

  Decoder& decoder() { return decoder_; }

  void reset() {
    messages_.clear();
    if (!system_.empty()) messages_.push_back({"system", system_});
  }

  // The user's message, the assistant's answer streamed to stdout; false (and the message not
  // kept) when the template refuses the conversation, it no longer fits the context, or Ctrl-C
  // came before the answer began.
  bool turn(const std::string& text) {
    g_interrupted = 0;
    messages_.push_back({"user", text});
    std::vector<int32_t> prompt;
    try {
      prompt = format_.encode(messages_, true);
    } catch (const Error& e) {
      messages_.pop_back();
      std::fprintf(stderr, "minfer: %s\n", e.what());
      return false;
    }
    const int64_t room = decoder_.n_ctx() - static_cast<int64_t>(prompt.size());
    if (room < 1) {
      messages_.pop_back();
      std::fprintf(stderr, "minfer: the conversation (%zu tokens) no longer fits the context of %lld; /reset starts "
                   "over\n", prompt.size(), static_cast<long long>(decoder_.n_ctx()));
      return false;
    }
    const double start = now_seconds();
    const int64_t cached = reuse_cache(prompt);
    decoder_.prefill({std::vector<int32_t>(prompt.begin() + cached, prompt.end())});
    history_.insert(history_.end(), prompt.begin() + cached, prompt.end());
    if (g_interrupted) {  // Ctrl-C while the prompt was read: no answer, and no message
      g_interrupted = 0;
      messages_.pop_back();
      std::printf("[stopped]\n");
      std::fflush(stdout);
      return false;
    }
    sampler_.begin(prompt.data(), static_cast<int64_t>(prompt.size()));
    std::vector<int32_t> answer = generate(room, start, static_cast<int64_t>(prompt.size()) - cached, cached);
    answer.erase(std::remove_if(answer.begin(), answer.end(), [&](int32_t t) { return t >= tokenizer_.vocab_size(); }),
                 answer.end());
    messages_.push_back({"assistant", tokenizer_.decode(answer)});
    return true;
  }

 private:
  static DecoderOptions decoder_options(const ModelInfo& info, const ChatSettings& s) {
    DecoderOptions d;
    MINFER_CHECK(!s.n_ctx || *s.n_ctx <= info.n_ctx, "--ctx: ", s.n_ctx.value_or(0), " is more than the model's context of ",
                 info.n_ctx);
    d.n_ctx = s.n_ctx ? *s.n_ctx : std::min<int64_t>(info.n_ctx, 4096);
    d.pass_rows = std::min<int64_t>(d.n_ctx, 512);
    return d;
  }

  // Rewinds the cache to the longest prefix of `prompt` it holds (short of the prompt's last
  // token, whose logits are wanted); returns its length.
  int64_t reuse_cache(const std::vector<int32_t>& prompt) {
    const int64_t shared = reusable_prefix(history_, prompt);
    decoder_.rewind(0, shared);
    history_.resize(static_cast<size_t>(shared));
    return shared;
  }

  // Samples until a stop token, the answer's limit, the end of the context or Ctrl-C.
  std::vector<int32_t> generate(int64_t room, double start, int64_t prefilled, int64_t cached) {
    std::vector<int32_t> answer;
    TextStream out(tokenizer_);
    const int64_t limit = max_answer_ > 0 ? std::min(max_answer_, room) : room;
    double first = 0;
    const char* ended = "";
    for (;;) {
      const int32_t token = sampler_.sample(decoder_.logits(0));
      if (first == 0) first = now_seconds();
      if (std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end()) break;
      answer.push_back(token);
      // (A model may pad its vocabulary past the tokenizer's: such a token has no text.)
      if (token < tokenizer_.vocab_size()) std::fputs(out.push(token).c_str(), stdout);
      std::fflush(stdout);
      if (g_interrupted) {
        ended = " [stopped]";
        break;
      }
      if (static_cast<int64_t>(answer.size()) >= limit) {
        ended = static_cast<int64_t>(answer.size()) >= room ? " [the context is full]" : " [the answer's limit, -n]";
        break;
      }
      decoder_.decode({token});
      history_.push_back(token);
    }
    g_interrupted = 0;
    std::printf("%s%s\n", out.flush().c_str(), ended);
    std::fflush(stdout);
    const double end = now_seconds();
    if (verbose_)
      std::fprintf(stderr,
                   "minfer: turn %lld: prefilled %lld of %lld tokens, %lld from the cache; first token after "
                   "%.1f ms; %zu tokens at %.1f tokens/s\n",
                   static_cast<long long>(++turns_), static_cast<long long>(prefilled),
                   static_cast<long long>(prefilled + cached), static_cast<long long>(cached),
                   1e3 * (first - start), answer.size(),
                   answer.size() > 1 ? double(answer.size() - 1) / (end - first) : 0.0);
    return answer;
  }

  const TextTokenizer& tokenizer_;
  const ChatFormat& format_;
  Decoder decoder_;
  Sampler sampler_;
  std::vector<int32_t> stop_ids_;
  int64_t max_answer_;
  bool verbose_;
  std::string system_;
  std::vector<ChatMessage> messages_;
  std::vector<int32_t> history_;  // the tokens whose keys and values the cache holds
  int64_t turns_ = 0;
};

void chat_loop(ChatSession& session) {
  const bool terminal = isatty(STDIN_FILENO) != 0;
  std::string line;
  for (;;) {
    if (terminal) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    bool interrupted = false;
    if (!read_line(&line, &interrupted)) break;
    if (interrupted) {
      std::fputs("\n(/exit or Ctrl-D to leave)\n", stdout);
      continue;
    }
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      session.reset();
      std::fputs("(a new conversation)\n", stdout);
      continue;
    }
    if (line.empty()) continue;
    session.turn(line);
  }
  if (terminal) std::fputs("\n", stdout);
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  Args args("chat",
            "Chats with an instruct model in its chat template, keeping the KV cache between turns.\n"
            "Type a message and Enter; /reset starts a new conversation, /exit or Ctrl-D ends it,\n"
            "Ctrl-C stops an answer.",
            chat_options());
  args.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::printf("%s", args.usage().c_str());
    return 0;
  }
  MINFER_CHECK(args.has("-m"), "-m MODEL is required (a Hugging Face folder or GGUF file of an instruct model)");
  const ChatSettings settings = chat_settings(args);
  std::unique_ptr<TextTokenizer> tokenizer = command_tokenizer(args, args.get("-m"));
  MINFER_CHECK(tokenizer != nullptr, "chat needs a tokenizer: this model carries none, give one with -z");
  const ChatFormat format(*tokenizer, args.get("--chat-template", ""));
  Engine engine = load_engine(args, args.get("-m"));
  check_tokenizer_fits(*tokenizer, engine.model->info(), args.has("-z") ? args.get("-z") : args.get("-m"));
  catch_sigint();
  ChatSession session(*engine.model, *tokenizer, format, settings);
  if (follow_rank_0(session.decoder())) return 0;
  const KvCache& cache = session.decoder().cache();
  std::fprintf(stderr, "minfer: chat template %s; KV cache %s (%s, %lld positions)\n",
               format.chat_template().name().c_str(), format_bytes(cache.bytes()).c_str(),
               dtype_name(cache.dtype()), static_cast<long long>(session.decoder().n_ctx()));
  chat_loop(session);
  session.decoder().end_following();
  return 0;
}

}  // namespace minfer::cli
