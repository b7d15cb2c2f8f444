// `minfer tokenize`: the ids of a text, as run.c's encode(text, bos=1, eos=0) gives them.
#include <cstdio>

#include "core/error.h"
#include "models/tokenizer.h"
#include "tools/args.h"
#include "tools/cli_common.h"
#include "tools/commands.h"

namespace minfer::cli {

int cmd_tokenize(int argc, char** argv) {
  Args args("tokenize", "Prints the token ids of a text (with BOS), comma-separated.",
            {{"-z,--tokenizer", "PATH", "llama2.c tokenizer.bin (required)"},
             {"-i,--prompt", "TEXT", "the text"},
             {"-f,--file", "PATH", "the text, from a file (instead of -i)"}});
  args.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::printf("%s", args.usage().c_str());
    return 0;
  }
  MINFER_CHECK(args.has("-z"), "-z TOKENIZER is required");
  Tokenizer tokenizer = Tokenizer::load(args.get("-z"));
  std::vector<int32_t> ids = tokenizer.encode(prompt_text(args), true, false);
  for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? "," : "", ids[i]);
  std::printf("\n");
  return 0;
}

}  // namespace minfer::cli
