// The committed model fixtures of tests/data/models/ (tests/data/make_model_fixtures.py): tiny
// random Llama models saved by transformers in f32, f16 and bf16 (one of them sharded), and GGUF
// files written by llama.cpp's own converter (F32, F16 and Q8_0), against what transformers
// computes on the same weights (for Q8_0: on the weights dequantized from the file). Checked for
// each: the model's own tokenizer gives the reference prompt ids, the logits at every prompt
// position agree by NMSE, and the greedy choice agrees at every step (fed the reference's tokens)
// where the reference's best logit leads the second by a clear margin (tests/greedy_check.h says
// why not everywhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/backend.h"
#include "engine/decoder.h"
#include "model/llama.h"
#include "formats/model_files.h"
#include "tests/test_support.h"

namespace minfer::test {
namespace {

const std::string kModels = std::string(MINFER_SOURCE_DIR) + "/tests/data/models";

struct Fixture {
  std::string model;          // a folder or a .gguf file
  std::string reference;      // its reference.json
  std::string logits_prefix;  // + the reference's logits_file
};

std::vector<Fixture> fixtures() {
  std::vector<Fixture> out;
  if (!std::filesystem::is_directory(kModels)) return out;
  for (const auto& entry : std::filesystem::directory_iterator(kModels)) {
    const std::string path = entry.path().string();
    if (entry.is_directory() && std::filesystem::exists(path + "/reference.json"))
      out.push_back({path, path + "/reference.json", path + "/"});
    if (entry.is_regular_file() && entry.path().extension() == ".gguf") {
      const std::string stem = path.substr(0, path.size() - 5);
      out.push_back({path, stem + ".reference.json", stem + "."});
    }
  }
  std::sort(out.begin(), out.end(), [](const Fixture& a, const Fixture& b) { return a.model < b.model; });
  return out;
}

std::vector<float> read_floats(const std::string& path) {
  const std::string bytes = read_file(path);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

std::string name_of(const Fixture& f) { return f.model.substr(kModels.size() + 1); }

// Limits. The stored weights are what both sides compute with, so the logits differ by rounding
// in f32: measured up to 1.9e-12 on the reference backend and 2.7e-12 on the CPU's, Q8_0 files
// on the reference backend included (their weights dequantize exactly). On the CPU a Q8_0 product
// also quantizes its activations to int8 per block, as llama.cpp does (NMSE about 1.6e-5 per
// product, tests/test_backend_ops.cpp), and these random models, whose weights are drawn large so
// that greedy margins are clear, amplify that through two layers: measured 6e-4 to 1.8e-3.
double logits_limit(const std::string& dtype, BackendKind kind) {
  if (dtype == "q8_0" && kind == BackendKind::cpu) return 5e-3;
  return 1e-10;
}
// Greedy ids must agree at every step whose reference margin is at least this. f32 rounding moves
// these logits by about 1e-5. int8 activations move them by 0.26 rms (NMSE 1e-3 of logits whose
// standard deviation is 8), so a difference of two by about 0.37 rms: 2.0 is over five of those.
double decisive_margin(const std::string& dtype, BackendKind kind) {
  return dtype == "q8_0" && kind == BackendKind::cpu ? 2.0 : 1e-3;
}

TEST(ModelFixtures, TokenizersGiveTheReferenceIds) {
  const std::vector<Fixture> all = fixtures();
  ASSERT_GE(all.size(), 9u) << "the fixtures of tests/data/models are missing (make_model_fixtures.py)";
  for (const Fixture& f : all) {
    std::unique_ptr<TextTokenizer> tokenizer = load_model_tokenizer(f.model);
    ASSERT_NE(tokenizer, nullptr) << name_of(f) << " carries no tokenizer";
    const nlohmann::json ref = nlohmann::json::parse(read_file(f.reference));
    for (const auto& prompt : ref["prompts"]) {
      const std::string text = prompt["text"].get<std::string>();
      EXPECT_EQ(tokenizer->encode(text, true), prompt["ids"].get<std::vector<int32_t>>()) << name_of(f) << ": " << text;
      EXPECT_EQ(tokenizer->decode(tokenizer->encode(text, false)), text) << name_of(f);
    }
  }
}

TEST(ModelFixtures, LogitsAndGreedyIdsMatchTransformers) {
  const std::vector<Fixture> all = fixtures();
  ASSERT_GE(all.size(), 9u) << "the fixtures of tests/data/models are missing (make_model_fixtures.py)";
  for (BackendKind kind : {BackendKind::ref, BackendKind::cpu}) {
    auto backend = make_backend(kind);
    for (const Fixture& f : all) {
      const std::string label = name_of(f) + " on " + backend_kind_name(kind);
      const nlohmann::json ref = nlohmann::json::parse(read_file(f.reference));
      const std::string dtype = ref["dtype"].get<std::string>();
      auto model = load_model(f.model, *backend, LlamaOptions{});
      if (dtype == "q8_0") {
        EXPECT_EQ(model->info().dtype, DType::q8_0) << label;
      }
      const int64_t vocab = model->info().vocab_size;
      const int64_t steps = ref["steps"].get<int64_t>();
      for (size_t p = 0; p < ref["prompts"].size(); ++p) {
        const auto& prompt = ref["prompts"][p];
        const std::vector<int32_t> ids = prompt["ids"].get<std::vector<int32_t>>();
        const std::vector<float> expected = read_floats(f.logits_prefix + prompt["logits_file"].get<std::string>());
        ASSERT_EQ(expected.size(), ids.size() * size_t(vocab)) << label;
        DecoderOptions dec;
        dec.n_ctx = int64_t(ids.size()) + steps;
        Decoder decoder(*model, dec);
        // The logits of every prompt position, fed a token at a time.
        double err = 0.0, norm = 0.0;
        for (size_t i = 0; i < ids.size(); ++i) {
          if (i == 0) decoder.prefill({{ids[0]}});
          else decoder.decode({ids[i]});
          const float* got = decoder.logits(0);
          for (int64_t v = 0; v < vocab; ++v) {
            const double e = expected[i * size_t(vocab) + size_t(v)];
            err += (e - got[v]) * (e - got[v]);
            norm += e * e;
          }
        }
        EXPECT_LE(err / norm, logits_limit(dtype, kind)) << label << ", prompt " << p;
        if (std::getenv("MINFER_TEST_VERBOSE")) std::printf("NMSE %.3g %s prompt %zu\n", err / norm, label.c_str(), p);
        // The greedy continuation after a batched prefill, fed the reference's own tokens (so that
        // one near-tie does not end the comparison): the best token must be the reference's at
        // every step where the reference's margin is decisive for this precision.
        decoder.reset();
        decoder.prefill({ids});
        const auto want = prompt["greedy"].get<std::vector<int32_t>>();
        const auto margins = prompt["margins"].get<std::vector<double>>();
        std::vector<int32_t> next;
        size_t compared = 0;
        for (int64_t s = 0; s < steps; ++s) {
          decoder.argmax(&next);
          if (margins[size_t(s)] >= decisive_margin(dtype, kind)) {
            EXPECT_EQ(next[0], want[size_t(s)]) << label << ", prompt " << p << ", step " << s << " (margin "
                                                << margins[size_t(s)] << ")";
            ++compared;
          }
          decoder.decode({want[size_t(s)]});
        }
        EXPECT_GE(compared, size_t(steps) / 4) << label << ", prompt " << p;
      }
    }
  }
}

// The command line end to end: the model's own tokenizer encodes the text, and the greedy ids
// printed are transformers'.
TEST(ModelFixtures, GenerateFromTextPrintsTheReferenceIds) {
  for (const std::string name : {"llama2-f32", "llama3-bf16", "llama2-f32.gguf"}) {
    const std::string path = kModels + "/" + name;
    const std::string reference = name.size() > 5 && name.substr(name.size() - 5) == ".gguf"
                                      ? path.substr(0, path.size() - 5) + ".reference.json"
                                      : path + "/reference.json";
    ASSERT_TRUE(std::filesystem::exists(reference)) << reference;
    const nlohmann::json ref = nlohmann::json::parse(read_file(reference));
    const auto& prompt = ref["prompts"][0];
    const auto margins = prompt["margins"].get<std::vector<double>>();
    size_t decisive = 0;
    while (decisive < margins.size() && margins[decisive] >= 1e-3) ++decisive;
    ASSERT_GE(decisive, 4u) << name;
    CliResult r = run_cli({"generate", "-m", path, "-i", prompt["text"].get<std::string>(), "-n",
                           std::to_string(decisive), "--temp", "0", "--ignore-eos", "--print-ids", "--device", "cpu"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<int32_t> want = prompt["greedy"].get<std::vector<int32_t>>();
    want.resize(decisive);
    EXPECT_EQ(parse_ids(r.out), want) << name;
  }
}

TEST(ModelFixtures, TokenizeCommandUsesTheModelsTokenizer) {
  const nlohmann::json ref = nlohmann::json::parse(read_file(kModels + "/llama3-bf16/reference.json"));
  const auto& prompt = ref["prompts"][1];
  for (const std::vector<std::string>& source :
       {std::vector<std::string>{"-m", kModels + "/llama3-bf16"}, {"-m", kModels + "/llama3-f16.gguf"},
        {"-z", kModels + "/llama3-bf16/tokenizer.json"}, {"-z", kModels + "/llama3-q8_0.gguf"}}) {
    std::vector<std::string> args = {"tokenize", source[0], source[1], "-i", prompt["text"].get<std::string>()};
    CliResult r = run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(parse_ids(r.out), prompt["ids"].get<std::vector<int32_t>>()) << source[1];
  }
  // No tokenizer to be had: refused with one line saying so.
  CliResult none = run_cli({"tokenize", "-m", "preset:tiny", "-i", "hello"});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("carries no tokenizer"), std::string::npos) << none.err;
  CliResult text = run_cli({"generate", "-m", "preset:tiny", "-i", "hello", "-n", "2"});
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_NE(text.err.find("needs a tokenizer"), std::string::npos) << text.err;
}

}  // namespace
}  // namespace minfer::test
