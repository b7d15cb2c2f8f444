// The minfer subcommands. Each takes the whole argv and parses from argv[2] on; each returns the
// process exit code and throws minfer::Error for anything the user must fix.
#pragma once

namespace minfer::cli {

int cmd_devices(int argc, char** argv);
int cmd_generate(int argc, char** argv);
int cmd_naive(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_make_model(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_demo(int argc, char** argv);
int cmd_perplexity(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_bench_serve(int argc, char** argv);

}  // namespace minfer::cli
