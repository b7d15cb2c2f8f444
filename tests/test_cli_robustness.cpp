// The command line against bad input, as a hostile but realistic user gives it: every case must
// end with the expected exit status, one line on stderr naming the problem, no signal, no hang,
// and no partial or truncated output file. Each case is its command, the status and a fragment
// of the expected message.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "tests/test_support.h"

namespace minfer::test {
namespace {

// Writes a llama2.c tokenizer.bin: pieces with scores.
void write_tokenizer(const std::string& path, const std::vector<std::string>& pieces) {
  std::ofstream out(path, std::ios::binary);
  uint32_t max_length = 1;
  for (const auto& p : pieces) max_length = std::max<uint32_t>(max_length, uint32_t(p.size()));
  out.write(reinterpret_cast<const char*>(&max_length), 4);
  for (size_t i = 0; i < pieces.size(); ++i) {
    float score = -float(i % 97);
    int32_t length = int32_t(pieces[i].size());
    out.write(reinterpret_cast<const char*>(&score), 4);
    out.write(reinterpret_cast<const char*>(&length), 4);
    out.write(pieces[i].data(), length);
  }
}

// A small but complete llama2.c vocabulary: <unk>, BOS, EOS, the 256 byte pieces, letters, and
// merges of them, so that ordinary text merges often.
std::vector<std::string> small_vocabulary() {
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    pieces.push_back(name);
  }
  for (char c = 'a'; c <= 'z'; ++c) pieces.push_back(std::string(1, c));
  pieces.push_back(" ");
  for (const char* p : {"th", "he", "the", " the", "in", "an", "and", " and", "er", "re", "on", "at", "en", "es",
                        "or", "ti", "te", "is", " a", " t", " i", "ing", "ion", "tion", "ed", " w", " o"})
    pieces.push_back(p);
  for (int i = 0; pieces.size() < 512; ++i) pieces.push_back("<unused" + std::to_string(i) + ">");  // preset:tiny's 512
  return pieces;
}

struct Case {
  std::vector<std::string> args;
  int status;
  std::string fragment;  // in stderr
};

void expect_case(const Case& c, const CliOptions& options = {}) {
  std::string command;
  for (const auto& a : c.args) command += " " + a;
  CliOptions o = options;
  o.timeout_s = 10;
  CliResult r = run_cli(c.args, o);
  EXPECT_FALSE(r.timed_out) << "minfer" << command << ": still running after 10 s";
  EXPECT_EQ(r.exit_code, c.status) << "minfer" << command << "\nstderr: " << r.err;
  EXPECT_NE(r.err.find(c.fragment), std::string::npos) << "minfer" << command << "\nexpected '" << c.fragment
                                                        << "' in stderr: " << r.err;
  if (c.status != 0) {
    // One line naming the problem: the error line (info lines before it are allowed).
    size_t errors = 0;
    for (size_t p = r.err.find("minfer: error: "); p != std::string::npos; p = r.err.find("minfer: error: ", p + 1))
      ++errors;
    EXPECT_EQ(errors, 1u) << "minfer" << command << ": " << r.err;
    EXPECT_EQ(r.err.back(), '\n') << "minfer" << command;
  }
}

TEST(CliRobustness, BadOptionsAreRefusedBeforeAnyWork) {
  const std::vector<Case> cases = {
      {{"generate", "-m", "preset:tiny", "--threads", "0"}, 1, "--threads: 0 is outside [1, 1024]"},
      {{"bench", "-m", "preset:tiny", "-t", "0"}, 1, "-t: 0 is outside [1, 1024]"},
      {{"bench", "-m", "preset:tiny", "--dtype", ""}, 1, "--dtype: empty list"},
      {{"bench", "-m", "preset:tiny", "--kernels", ""}, 1, "--kernels: empty list"},
      {{"bench", "-m", "preset:tiny", "-B", "1,"}, 1, "has an empty item"},
      {{"bench", "-m", "preset:tiny", "-p", "8,,16"}, 1, "has an empty item"},
      {{"bench", "-m", "preset:tiny", "-p", "0", "-n", "0"}, 1, "nothing to measure"},
      {{"bench", "-m", "preset:tiny", "--device", "cpu", "--graphs", "on"}, 1, "--graphs applies to CUDA only"},
      {{"bench", "-m", "preset:tiny", "--device", "cpu", "--gemm", "mma"}, 1, "--gemm applies to CUDA only"},
      {{"generate", "-m", "preset:tiny", "--device", "cpu", "--graphs", "off"}, 1, "on the cpu device"},
      {{"generate", "-m", "preset:tiny", "--device", "ref", "--threads", "2"}, 1, "does nothing on the ref device"},
      {{"generate", "-m", "preset:tiny", "--device", "ref", "--batch-invariant"}, 1,
       "--batch-invariant applies to the CPU backend only"},
      {{"generate", "-m", "preset:tiny", "--temp", "1", "--temp", "2"}, 1, "--temp is given twice"},
      {{"generate", "-m", "preset:tiny", "--top-p", "0"}, 1, "--top-p: 0 is outside (0, 1]"},
      {{"generate", "-m", "preset:tiny", "--top-p", "1.5"}, 1, "--top-p: 1.5 is outside [0, 1]"},
      {{"generate", "-m", "preset:tiny", "--temp", "-1"}, 1, "--temp: -1 is outside"},
      {{"generate", "-m", "preset:tiny", "--temp", "nan"}, 1, "--temp: 'nan' is not a number"},
      {{"generate", "-m", "preset:tiny", "--seed", "0"}, 1, "--seed: 0 is outside"},
      {{"chat"}, 1, "-m MODEL is required"},
      {{"chat", "-m", "preset:tiny", "--temp", "-1"}, 1, "--temp: -1 is outside"},
      {{"chat", "-m", "preset:tiny"}, 1, "chat needs a tokenizer: this model carries none"},
      {{"chat", "-m", MINFER_SOURCE_DIR "/tests/data/models/llama2-f32.gguf"}, 1,
       "carries no chat template; choose one with --chat-template NAME"},
      {{"chat", "-m", MINFER_SOURCE_DIR "/tests/data/models/smollm-chat", "--chat-template", "vicuna"}, 1,
       "vicuna"},
      {{"chat", "-m", MINFER_SOURCE_DIR "/tests/data/models/smollm-chat", "--chat-template", "mistral", "--system",
        "x"},
       1, "refuses this conversation at message 1 (system): Conversation roles must alternate"},
      {{"generate", "-m", "preset:tiny", "-n", "0"}, 1, "--n-new: 0 is outside"},
      {{"generate", "-m", "preset:tiny", "--prompt-ids", "1,,2"}, 1, "has an empty item"},
      {{"generate", "-m", "preset:tiny", "--prompt-ids", "1,600"}, 1, "token id 600 is outside the vocabulary"},
      {{"generate", "-m", "preset:tiny", "--bogus"}, 1, "unknown option '--bogus'"},
      {{"generate", "-m", "preset:nope"}, 1, "preset"},
      {{"generate", "-m", "preset:tiny", "--prompt-ids", "1", "-n", "600"}, 1, "> context 512"},
      {{"make-model", "-o", "/nonexistent-dir/x.bin"}, 1, "No such file or directory"},
      {{"make-model", "--vocab", "2", "-o", "/tmp/never-written.bin"}, 1, "vocab_size = 2, must be in [3"},
      {{"make-model", "--vocab", "-5", "-o", "/tmp/never-written.bin"}, 1, "vocab_size = -5"},
      {{"make-model", "--dim", "100000", "-o", "/tmp/never-written.bin"}, 1, "dim = 100000"},
      {{"make-model", "--preset", "qwen3-0.6b", "--format", "gguf", "-o", "/tmp/never-written.gguf"}, 1,
       "make-model: preset qwen3-0.6b has q and k norms (Qwen3, Gemma 3), and make-model writes Llama models"},
      {{"make-model", "--preset", "gemma3-270m", "-o", "/tmp/never-written.bin"}, 1,
       "make-model: preset gemma3-270m has q and k norms (Qwen3, Gemma 3)"},
      {{"bench", "-m", "preset:tiny", "--save-json", "/nonexistent-dir/r.json"}, 1, "No such file or directory"},
      {{"bench", "-m", "preset:tiny", "--save-json", "/dev/full"}, 1, "is a character device"},
      {{"bench", "-m", "preset:tiny", "--save-json", "/tmp"}, 1, "is a directory"},
      {{"demo", "launch", "--out", "/dev/null/x"}, 1, "--out: cannot create /dev/null/x"},
      {{"perplexity", "-m", "preset:tiny", "--ids", "/nonexistent/ids.txt"}, 1, "No such file or directory"},
      {{"perplexity", "-m", "preset:tiny", "--ids", "/dev/zero"}, 1, "is a character device"},
      {{"perplexity", "-m", "preset:tiny", "--ids", "/dev/null"}, 1, "is a character device"},
      {{"perplexity", "-m", "preset:tiny", "-c", "2", "-i", "x"}, 1, "needs a tokenizer"},
      {{"perplexity", "-m", "preset:tiny", "--kl-base", "f64", "--ids", "/tmp"}, 1, "unknown dtype 'f64'"},
      {{"tokenize", "-i", "hello"}, 1, "give the tokenizer as -m MODEL or -z TOKENIZER"},
      {{"generate", "-m", MINFER_SOURCE_DIR "/tests/data/models/llama2-f32.gguf", "--dtype", "q4_k", "-n", "2"}, 1,
       "q4_k weights are read from GGUF files, not made at load"},
      {{"make-model", "--format", "gguf", "--dtype", "q6_k", "-o", "/tmp/minfer-never.gguf"}, 1, "--dtype: weights are"},
      {{"generate", "-m", "preset:tiny", "--dtype", "q4_x", "-n", "2"}, 1, "'q4_x' is not a weights type"},
      {{"bench-serve", "-m", "preset:tiny", "--prompt-len", "5-"}, 1, "--prompt-len"},
      {{"bench-serve", "-m", "preset:tiny", "--output-len", "9-3"}, 1, "is not a range LO-HI"},
      {{"bench-serve", "-m", "preset:tiny", "--slots", "0"}, 1, "--slots: 0 is outside"},
      {{"bench-serve", "-m", "preset:tiny", "--slots", "8", "--step-tokens", "4"}, 1, "must be at least the slots"},
      {{"bench-serve", "-m", "preset:tiny", "--policy", "fifo"}, 1, "is not continuous, static or both"},
      {{"bench-serve", "-m", "preset:tiny", "--ctx", "10"}, 1, "need 511 positions"},
      {{"bench-serve", "-m", "preset:tiny", "--rate", "-1"}, 1, "--rate: -1 is outside"},
      {{"bench-serve", "-m", "preset:tiny", "--save-json", "/tmp"}, 1, "is a directory"},
      {{"generate", "-m", "preset:tiny", "-n", "4", "--kv-dtype", "q8_0"}, 1, "--kv-dtype: 'q8_0' is not f32, f16 or bf16"},
      {{"bench-serve", "-m", "preset:tiny", "--kv-dtype", "i32"}, 1, "--kv-dtype: 'i32' is not f32, f16 or bf16"},
      {{"generate", "-m", "preset:tiny", "-n", "4", "--device", "cpu", "--kv-dtype", "bf16"}, 1,
       "a bf16 KV cache runs on CUDA and ref, not cpu"},
      {{"bench", "-m", "preset:tiny", "-p", "0", "-n", "4", "--kv-dtype", "f8"}, 1, "--kv-dtype: 'f8' is not f32, f16 or bf16"},
      {{"bench-serve", "-m", "preset:tiny", "--requests", "4", "--device", "cpu", "--kv-dtype", "bf16"}, 1,
       "a bf16 KV cache runs on CUDA and ref, not cpu"},
      {{"perplexity", "-m", "preset:tiny", "--ids", "/tmp", "--kv-dtype", "q4"}, 1, "--kv-dtype: 'q4' is not"},
      {{"generate", "-m", "/nonexistent/model.bin", "--kv-dtype", "q4"}, 1, "--kv-dtype: 'q4' is not"},
  };
  for (const Case& c : cases) expect_case(c);
}

TEST(CliRobustness, InputsMustBeRegularFilesAndSayWhyNot) {
  ScratchDir dir("inputs");
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  std::filesystem::create_directories(dir.file("a-directory"));
  const std::vector<Case> cases = {
      {{"generate", "-m", fifo, "-n", "2"}, 1, "is a FIFO (named pipe), not a regular file"},
      {{"tokenize", "-z", fifo, "-i", "hi"}, 1, "is a FIFO (named pipe), not a regular file"},
      {{"generate", "-m", dir.file("a-directory"), "-n", "2"}, 1, "a directory, but not a Hugging Face model folder"},
      {{"tokenize", "-z", dir.file("a-directory"), "-i", "hi"}, 1, "is a directory, not a regular file"},
      {{"tokenize", "-z", dir.file("missing.bin"), "-i", "hi"}, 1, "cannot open the tokenizer: No such file or directory"},
      {{"generate", "-m", "/dev/zero", "-n", "2"}, 1, "is a character device"},
  };
  for (const Case& c : cases) expect_case(c);
  if (geteuid() != 0) {  // root reads anything, so an unreadable file cannot be made as root
    const std::string locked = dir.file("locked.bin");
    write_tokenizer(locked, small_vocabulary());
    chmod(locked.c_str(), 0);
    expect_case({{"tokenize", "-z", locked, "-i", "hi"}, 1, "Permission denied"});
  }
}

TEST(CliRobustness, TooSmallModelsAndTokenizersAreRefusedAtLoad) {
  ScratchDir dir("small");
  write_tokenizer(dir.file("one.bin"), {"<unk>"});
  write_tokenizer(dir.file("no-bytes.bin"), {"<unk>", "<s>", "</s>", "a", "b"});
  std::vector<std::string> shuffled = small_vocabulary();
  std::swap(shuffled[3 + 'A'], shuffled[3 + 'B']);
  write_tokenizer(dir.file("shuffled.bin"), shuffled);
  expect_case({{"tokenize", "-z", dir.file("one.bin"), "-i", "hello"}, 1, "holds 1 tokens; a llama2.c tokenizer has at least 259"});
  expect_case({{"tokenize", "-z", dir.file("no-bytes.bin"), "-i", "hello"}, 1, "at least 259"});
  expect_case({{"tokenize", "-z", dir.file("shuffled.bin"), "-i", "hello"}, 1, "where a llama2.c tokenizer has the byte piece <0x41>"});
  // The smallest vocabulary a model may have (BOS, EOS and one more) runs everywhere.
  const std::string model = dir.file("vocab3.bin");
  expect_case({{"make-model", "--vocab", "3", "-o", model}, 0, "wrote"});
  expect_case({{"bench", "-m", model, "-p", "4", "-n", "4", "-r", "1", "--device", "cpu"}, 0, ""});
  expect_case({{"generate", "-m", model, "-n", "4", "--temp", "0.7", "--seed", "3", "--device", "cpu"}, 0, "minfer"});
}

TEST(CliRobustness, TinyTemperaturesSampleGreedily) {
  auto ids = [](const char* temp) {
    CliResult r = run_cli({"generate", "-m", "preset:tiny", "--prompt-ids", "1,7,9", "-n", "12", "--temp", temp,
                           "--seed", "5", "--print-ids", "--ignore-eos", "--device", "cpu"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  const std::string greedy = ids("0");
  for (const char* temp : {"1e-40", "1e-39", "1e-300"}) EXPECT_EQ(ids(temp), greedy) << "--temp " << temp;
}

// 128 KB of text encodes in well under the hang limit (the merge loop is O(n log n); the
// quadratic one took 20 s for 30 KB), and a prompt that cannot fit the context is refused with
// its token count.
TEST(CliRobustness, LongTextsEncodeQuicklyAndLongPromptsAreRefusedWithTheirLength) {
  ScratchDir dir("long");
  write_tokenizer(dir.file("tok.bin"), small_vocabulary());
  std::mt19937 rng(1);
  const char* words[] = {"the", "and", "tion", "thing", "river", "zebra", "in", "an", "a", "quietly"};
  std::string text;
  while (text.size() < 128 * 1024) text += std::string(words[rng() % 10]) + " ";
  {
    std::ofstream out(dir.file("text.txt"));
    out << text;
  }
  CliResult r = run_cli({"tokenize", "-z", dir.file("tok.bin"), "-f", dir.file("text.txt")}, CliOptions{"", "", {}, 10});
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(parse_ids(r.out).size(), 10000u);
  std::fprintf(stderr, "128 KB encoded in %.2f s (process included)\n", r.seconds);
  // The same text as a prompt is far more tokens than preset:tiny's 512 positions.
  expect_case({{"generate", "-m", "preset:tiny", "-z", dir.file("tok.bin"), "-f", dir.file("text.txt"), "-n", "4",
                "--device", "cpu"},
               1, "positions > context 512"});
}

TEST(CliRobustness, AFullStdoutIsAnError) {
  CliOptions o;
  o.stdout_path = "/dev/full";
  expect_case({{"generate", "-m", "preset:tiny", "-n", "8", "--print-ids", "--device", "cpu"}, 1,
               "writing to standard output failed: No space left on device"},
              o);
  expect_case({{"devices"}, 1, "writing to standard output failed"}, o);
}

// A reader that went away (`minfer ... | head -c 1` after head exits): an error, not SIGPIPE.
TEST(CliRobustness, AClosedPipeOnStdoutIsAnErrorNotASignal) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  close(fds[0]);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    execl(MINFER_CLI_PATH, MINFER_CLI_PATH, "devices", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status)) << "ended by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 1);
}

std::string sha_of(const std::string& path) {  // the bytes are enough: compare contents
  return read_file(path);
}

// A failed write (a full disk, simulated by the writer's test hook) leaves the old file as it
// was and no temporary file behind; so does SIGINT in the middle of writing a model.
TEST(CliRobustness, FilesAreWrittenWholeOrNotAtAll) {
  ScratchDir dir("whole");
  const std::string model = dir.file("model.bin");
  expect_case({{"make-model", "--preset", "tiny", "-o", model}, 0, "wrote"});
  const std::string original = sha_of(model);
  ASSERT_GT(original.size(), 1000000u);
  CliOptions full;
  full.env = {"MINFER_FAIL_WRITES_AFTER=100000"};
  expect_case({{"make-model", "--preset", "tiny", "--seed", "9", "-o", model}, 1, "No space left on device"}, full);
  EXPECT_EQ(sha_of(model), original) << "the old model must survive a failed write";
  const std::string json = dir.file("r.json");
  expect_case({{"bench", "-m", "preset:tiny", "-p", "4", "-n", "4", "-r", "1", "--device", "cpu", "--save-json", json},
               0, ""});
  const std::string old_json = sha_of(json);
  ASSERT_NE(old_json.find("\"model\""), std::string::npos);
  full.env = {"MINFER_FAIL_WRITES_AFTER=10"};
  expect_case({{"bench", "-m", "preset:tiny", "-p", "4", "-n", "4", "-r", "1", "--device", "cpu", "--save-json", json},
               1, "No space left on device"},
              full);
  EXPECT_EQ(sha_of(json), old_json);
  expect_case({{"demo", "launch", "--quick", "--out", dir.file("demos")}, 1, "No space left on device"}, full);
  EXPECT_FALSE(std::filesystem::exists(dir.file("demos/launch.json")));

  // SIGINT while a 58 MB model is being written: wait for its temporary file, interrupt.
  std::string command = std::string(MINFER_CLI_PATH) + " make-model --preset stories15M --threads 1 -o " + model;
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + command + " 2>/dev/null").c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  bool saw_temporary = false;
  for (int i = 0; i < 5000 && !saw_temporary; ++i) {
    for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
      if (entry.path().filename().string().rfind(".model.bin.tmp-", 0) == 0) saw_temporary = true;
    if (!saw_temporary) usleep(1000);
  }
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!saw_temporary) GTEST_SKIP() << "skipped: the model was written before the interrupt could land";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << "status " << status;
  EXPECT_EQ(sha_of(model), original) << "an interrupted write must leave the old model";
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos)
        << "temporary file left behind: " << entry.path();
}

}  // namespace
}  // namespace minfer::test
