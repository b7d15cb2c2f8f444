// `minfer tokenize`: the ids of a text with a model's tokenizer (or one named with -z), as the
// tokenizers library, llama.cpp or run.c give them.
#include <cstdio>
#include <string>

#include "core/error.h"
#include "cli/args.h"
#include "cli/cli_common.h"
#include "cli/commands.h"

namespace minfer::cli {

namespace {
// "text" with quotes, backslashes and control bytes escaped (\n, \t, \xNN); other bytes as they are.
std::string quoted(const std::string& bytes) {
  std::string out = "\"";
  for (char c : bytes) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", u);
      out += hex;
    } else {
      out += c;
    }
  }
  return out + "\"";
}
}  // namespace

int cmd_tokenize(int argc, char** argv) {
  Args args("tokenize",
            "Prints the token ids of a text, comma-separated, with the special tokens the tokenizer adds\n"
            "(BOS for Llama 2 and 3 and llama2.c).",
            {{"-m,--model", "MODEL", "a model that carries a tokenizer: a Hugging Face folder (tokenizer.json) or a GGUF file"},
             {"-z,--tokenizer", "PATH", "a tokenizer.json, a GGUF file or llama2.c's tokenizer.bin (instead of -m)"},
             {"-i,--prompt", "TEXT", "the text"},
             {"-f,--file", "PATH", "the text, from a file (instead of -i)"},
             {"--no-special", "", "without the special tokens the tokenizer adds (no BOS)"},
             {"--no-parse-special", "",
              "special-token text such as <|im_start|> as the ordinary tokens of its characters, not\n"
              "                            as the special token (llama-tokenize's --no-parse-special)"},
             {"--pieces", "", "print each id with the bytes it adds to the text, quoted, one per line"}});
  args.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::printf("%s", args.usage().c_str());
    return 0;
  }
  MINFER_CHECK(args.has("-m") != args.has("-z"), "give the tokenizer as -m MODEL or -z TOKENIZER, one of them");
  std::unique_ptr<TextTokenizer> tokenizer = command_tokenizer(args, args.get("-m"));
  MINFER_CHECK(tokenizer != nullptr, args.get("-m"), " carries no tokenizer (a llama2.c checkpoint or a GGUF file ",
               "without a vocabulary): give one with -z");
  const std::string text = prompt_text(args);
  const bool add_special = !args.has("--no-special");
  const std::vector<int32_t> ids = args.has("--no-parse-special") ? tokenizer->encode_plain(text, add_special)
                                                                 : tokenizer->encode(text, add_special);
  if (args.has("--pieces")) {
    for (size_t i = 0; i < ids.size(); ++i)
      std::printf("%d\t%s\n", ids[i], quoted(tokenizer->token_bytes(i ? ids[i - 1] : -1, ids[i])).c_str());
    return 0;
  }
  for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? "," : "", ids[i]);
  std::printf("\n");
  return 0;
}

}  // namespace minfer::cli
