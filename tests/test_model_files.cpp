// Hugging Face folders and GGUF files: written by minfer's writers from random weights, read back
// by the loaders, and run against the independent naive forward pass on the same weights (in
// their stored precision); and malformed files of every kind refused with one line, exit 1.
// (The fixtures made with transformers and llama.cpp's converter are checked in
// tests/test_model_fixtures.cpp.)
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/decoder.h"
#include "model/llama.h"
#include "formats/checkpoint.h"
#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "formats/hf_model.h"
#include "formats/model_files.h"
#include "formats/model_writers.h"
#include "tests/random_llama.h"
#include "tests/op_harness.h"
#include "tests/test_support.h"

namespace minfer::test {
namespace {

LlamaConfig base_config(int64_t heads, int64_t kv_heads, bool shared) {
  LlamaConfig c;
  c.dim = 64;
  c.hidden_dim = 150;
  c.n_layers = 2;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.vocab_size = 91;
  c.n_ctx = 48;
  c.shared_classifier = shared;
  return c;
}

struct Named {
  const char* name;
  LlamaConfig config;
};

std::vector<Named> configs() {
  LlamaConfig llama3 = base_config(4, 1, true);
  llama3.head_size = 24;
  llama3.rope_theta = 500000.0;
  llama3.rope_scaling.type = RopeScaling::Type::llama3;
  llama3.rope_scaling.factor = 8.0;
  llama3.rope_scaling.original_max_positions = 16;
  llama3.rms_eps = 1e-6f;
  llama3.bos_id = 0;
  llama3.stop_ids = {3, 5};
  LlamaConfig linear = base_config(4, 4, false);
  linear.rope_scaling.type = RopeScaling::Type::linear;
  linear.rope_scaling.factor = 2.0;
  return {{"grouped-query 8/2, untied", base_config(8, 2, false)},
          {"multi-query 4/1 of head_dim 24, theta 5e5, llama3 scaling, tied", llama3},
          {"linear scaling, untied", linear}};
}

// The weights as they are stored in `dtype`: matrices and embedding rounded, norms kept in f32.
LlamaHostWeights rounded(const LlamaHostWeights& w, DType dtype) {
  auto round_trip = [&](const Tensor& t) {
    if (dtype == DType::f32) return t;
    Tensor narrow = host_tensor(t.shape(), dtype), wide = host_tensor(t.shape(), DType::f32);
    narrow.convert_from(t);
    wide.convert_from(narrow);
    return wide;
  };
  LlamaHostWeights r = w;
  r.token_embedding = round_trip(w.token_embedding);
  r.classifier = w.config.shared_classifier ? r.token_embedding : round_trip(w.classifier);
  for (auto& l : r.layers)
    for (Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3}) *t = round_trip(*t);
  return r;
}

// Logits of a prompt of 9 tokens and 6 more fed one by one, on the reference backend.
std::vector<std::vector<double>> minfer_logits(const std::string& path, const std::vector<int32_t>& tokens) {
  auto backend = make_backend(BackendKind::ref);
  auto model = load_model(path, *backend, LlamaOptions{});
  Decoder decoder(*model, DecoderOptions{});
  std::vector<std::vector<double>> out;
  auto collect = [&] {
    const float* l = decoder.logits(0);
    out.emplace_back(l, l + model->info().vocab_size);
  };
  decoder.prefill({std::vector<int32_t>(tokens.begin(), tokens.begin() + 9)});
  collect();
  for (size_t i = 9; i < tokens.size(); ++i) {
    decoder.decode({tokens[i]});
    collect();
  }
  return out;
}

std::vector<std::vector<double>> naive_logits(const LlamaHostWeights& w, const std::vector<int32_t>& tokens) {
  NaiveLlama naive(w);
  std::vector<std::vector<double>> out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::vector<double> l = naive_forward(naive, tokens[i], int64_t(i));
    if (i >= 8) out.push_back(l);
  }
  return out;
}

double worst_nmse(const std::vector<std::vector<double>>& e, const std::vector<std::vector<double>>& a) {
  double worst = 0.0;
  for (size_t i = 0; i < e.size(); ++i) {
    double err = 0.0, norm = 0.0;
    for (size_t j = 0; j < e[i].size(); ++j) {
      err += (e[i][j] - a[i][j]) * (e[i][j] - a[i][j]);
      norm += e[i][j] * e[i][j];
    }
    worst = std::max(worst, err / norm);
  }
  return worst;
}

TEST(ModelFiles, WrittenFoldersAndGgufFilesReadBackAndRunLikeTheNaiveForwardPass) {
  ScratchDir dir("model-files");
  std::vector<int32_t> tokens;
  for (int i = 0; i < 15; ++i) tokens.push_back((i * 37 + 5) % 91);
  for (const Named& n : configs()) {
    LlamaHostWeights w = random_llama_weights(n.config, 7, 2.5);
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      const auto expected = naive_logits(rounded(w, dtype), tokens);
      const std::string folder = dir.file(std::string("hf-") + dtype_name(dtype));
      write_hf_folder(folder, w, dtype);
      const std::string gguf = dir.file(std::string("model-") + dtype_name(dtype) + ".gguf");
      write_gguf(gguf, w, dtype, nullptr);
      for (const std::string& path : {folder, folder + "/model.safetensors", gguf}) {
        const std::string label = std::string(n.name) + ", " + dtype_name(dtype) + ", " + path.substr(dir.path().size());
        LlamaHostWeights read = load_model_weights(path);
        const LlamaConfig& c = read.config;
        EXPECT_EQ(c.head_dim(), n.config.head_dim()) << label;
        EXPECT_EQ(c.n_kv_heads, n.config.n_kv_heads) << label;
        EXPECT_EQ(c.shared_classifier, n.config.shared_classifier) << label;
        EXPECT_EQ(c.rms_eps, n.config.rms_eps) << label;
        EXPECT_EQ(c.bos_id, n.config.bos_id) << label;
        EXPECT_EQ(c.stop_ids, n.config.stop_ids.empty() ? std::vector<int32_t>{} : path == gguf
                                  ? std::vector<int32_t>{n.config.stop_ids.back()} : n.config.stop_ids) << label;
        EXPECT_EQ(read.token_embedding.dtype(), dtype) << label;
        EXPECT_LE(worst_nmse(expected, minfer_logits(path, tokens)), 1e-10) << label;
      }
    }
  }
}

// The header digest ranks compare (LlamaHostWeights::header_digest): the same on two reads of a
// file, and another for a file of another shape (2 KV heads, not 4) or type, in every format.
TEST(ModelFiles, HeaderDigestsAgreeOnAFileAndTellFilesApart) {
  ScratchDir dir("header-digest");
  std::vector<std::string> paths;
  for (int64_t kv_heads : {4, 2}) {
    const LlamaHostWeights w = random_llama_weights(base_config(4, kv_heads, false), 7, 2.5);
    const std::string tag = std::to_string(kv_heads);
    write_checkpoint(dir.file("model-" + tag + ".bin"), w, CheckpointFormat::v0);
    paths.push_back(dir.file("model-" + tag + ".bin"));
    for (DType dtype : {DType::f32, DType::f16}) {
      const std::string name = tag + "-" + dtype_name(dtype);
      write_hf_folder(dir.file("hf-" + name), w, dtype);
      write_gguf(dir.file("model-" + name + ".gguf"), w, dtype, nullptr);
      paths.push_back(dir.file("hf-" + name));
      paths.push_back(dir.file("model-" + name + ".gguf"));
    }
  }
  std::vector<uint64_t> digests;
  for (const std::string& path : paths) {
    digests.push_back(load_model_weights(path).header_digest);
    EXPECT_NE(digests.back(), 0u) << path;
    EXPECT_EQ(load_model_weights(path).header_digest, digests.back()) << path;
  }
  for (size_t i = 0; i < paths.size(); ++i)
    for (size_t j = i + 1; j < paths.size(); ++j) EXPECT_NE(digests[i], digests[j]) << paths[i] << ", " << paths[j];
}

// GGUF data starts at the first multiple of general.alignment after the header, whatever the
// header's length: for the default 32 and for 64, general.name 0 to A - 1 bytes longer ends the
// header at every offset from a multiple of A, and each file reads back to the weights written. A
// reader that skipped no padding, or took 32 for every file, reads shifted bytes.
TEST(ModelFiles, GgufDataStartsAtTheAlignmentAfterAnyHeader) {
  ScratchDir dir("gguf-alignment");
  const LlamaHostWeights w = random_llama_weights(base_config(4, 2, false), 11, 2.5);
  auto same_bytes = [](const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
  };
  for (uint32_t alignment : {32u, 64u})
    for (uint32_t extra = 0; extra < alignment; ++extra) {
      const std::string label = "alignment " + std::to_string(alignment) + ", name " + std::to_string(extra) + " longer";
      const std::string path = dir.file("model-" + std::to_string(alignment) + "-" + std::to_string(extra) + ".gguf");
      write_gguf(path, w, DType::f32, nullptr, GgufLayout{alignment, "model" + std::string(extra, 'x')});
      const GgufFile file(path);
      EXPECT_EQ(file.contents().alignment, alignment) << label;
      EXPECT_EQ(file.contents().data_offset % alignment, 0u) << label;
      const LlamaHostWeights read = load_model_weights(path);
      EXPECT_TRUE(same_bytes(read.token_embedding, w.token_embedding)) << label;
      EXPECT_TRUE(same_bytes(read.rms_final, w.rms_final)) << label;
      EXPECT_TRUE(same_bytes(read.classifier, w.classifier)) << label;
      EXPECT_TRUE(same_bytes(read.layers.back().w2, w.layers.back().w2)) << label;
      EXPECT_TRUE(same_bytes(read.layers.front().rms_ffn, w.layers.front().rms_ffn)) << label;
    }
}

// The format comes from the path (a folder) and the first bytes, not the extension; a folder, a
// GGUF and a llama2.c file of the same weights give the same logits (the folder's q and k rows
// in rotate-half order, the others' interleaved).
TEST(ModelFiles, FormatDetectionReadsThePathAndTheMagicNotTheExtension) {
  ScratchDir dir("detect");
  LlamaHostWeights w = random_llama_weights(base_config(4, 2, true), 3, 2.5);
  write_gguf(dir.file("model.bin"), w, DType::f32, nullptr);  // a GGUF file with another name
  write_checkpoint(dir.file("model.gguf.old"), w, CheckpointFormat::v0);
  write_hf_folder(dir.file("folder"), w, DType::f32);
  EXPECT_EQ(detect_model_format(dir.file("model.bin")), ModelFormat::gguf);
  EXPECT_EQ(detect_model_format(dir.file("model.gguf.old")), ModelFormat::llama2c);
  EXPECT_EQ(detect_model_format(dir.file("folder")), ModelFormat::huggingface);
  EXPECT_EQ(detect_model_format(dir.file("folder/model.safetensors")), ModelFormat::huggingface);
  std::vector<int32_t> tokens = {1, 5, 9, 2, 7, 7, 3, 8, 4, 6, 1};
  const auto a = minfer_logits(dir.file("model.bin"), tokens), b = minfer_logits(dir.file("folder"), tokens),
             c = minfer_logits(dir.file("model.gguf.old"), tokens);
  EXPECT_LE(worst_nmse(a, b), 1e-12);
  EXPECT_LE(worst_nmse(a, c), 1e-12);
}

// --- malformed files ---

std::string slurp(const std::string& path) { return read_file(path); }
void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

struct Broken {
  std::string what, path, fragment;
};

void expect_refused(const Broken& b) {
  CliResult r = run_cli({"generate", "-m", b.path, "--prompt-ids", "1,2", "-n", "2", "--device", "cpu"},
                        CliOptions{"", "", {}, 20});
  EXPECT_FALSE(r.timed_out) << b.what;
  EXPECT_EQ(r.exit_code, 1) << b.what << ": " << r.err;
  EXPECT_NE(r.err.find(b.fragment), std::string::npos) << b.what << ": expected '" << b.fragment << "' in: " << r.err;
  size_t lines = 0;
  for (char ch : r.err) lines += ch == '\n';
  EXPECT_EQ(lines, 1u) << b.what << ": " << r.err;
}

// A safetensors file with its header replaced (the data kept).
std::string with_header(const std::string& file, const nlohmann::json& header) {
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data 8-byte aligned, as every writer leaves it
  const uint64_t length = text.size();
  return std::string(reinterpret_cast<const char*>(&length), 8) + text + file.substr(8 + n);
}

nlohmann::json header_of(const std::string& file) {
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  return nlohmann::json::parse(file.substr(8, n));
}

TEST(ModelFiles, MalformedSafetensorsAndConfigsAreRefusedWithOneLine) {
  ScratchDir dir("broken-hf");
  LlamaHostWeights w = random_llama_weights(base_config(4, 2, false), 5, 1.0);
  const std::string good = dir.file("good");
  write_hf_folder(good, w, DType::bf16);
  const std::string weights = slurp(good + "/model.safetensors"), config = slurp(good + "/config.json");
  std::vector<Broken> cases;
  int counter = 0;
  auto folder_with = [&](const std::string& what, const std::string& safetensors, const std::string& config_text,
                         const std::string& fragment) {
    const std::string f = dir.file("case" + std::to_string(counter++));
    std::filesystem::create_directories(f);
    spit(f + "/model.safetensors", safetensors);
    spit(f + "/config.json", config_text);
    cases.push_back({what, f, fragment});
  };
  auto config_with = [&](const std::string& what, const std::function<void(nlohmann::json&)>& edit,
                         const std::string& fragment) {
    nlohmann::json c = nlohmann::json::parse(config);
    edit(c);
    folder_with(what, weights, c.dump(), fragment);
  };
  auto header_with = [&](const std::string& what, const std::function<void(nlohmann::json&)>& edit,
                         const std::string& fragment) {
    nlohmann::json h = header_of(weights);
    edit(h);
    folder_with(what, with_header(weights, h), config, fragment);
  };
  for (size_t cut : {size_t(0), size_t(4), size_t(7), size_t(100), weights.size() / 2, weights.size() - 1})
    folder_with("truncated at " + std::to_string(cut), weights.substr(0, cut), config,
                cut == 0 ? "is empty" : cut < 8 ? "too short for a safetensors header" : cut <= 100 ? "runs past the end"
                                                                                                : "spans bytes");
  {
    std::string huge = weights;
    const uint64_t n = uint64_t(1) << 40;
    std::memcpy(huge.data(), &n, 8);
    folder_with("a header length of 2^40", huge, config, "header length 1099511627776 is outside");
  }
  {
    std::string bad = weights;
    bad[9] = '#';
    folder_with("a header that is not JSON", bad, config, "not valid JSON");
  }
  header_with("a weight of dtype I64", [](nlohmann::json& h) {
    h["model.layers.0.self_attn.q_proj.weight"]["dtype"] = "I64";
    h["model.layers.0.self_attn.q_proj.weight"]["shape"] = {32, 32};  // the bytes of bf16 (64, 64)
  }, "is I64; minfer reads F32, F16 and BF16 weights");
  header_with("an unknown dtype", [](nlohmann::json& h) { h["model.norm.weight"]["dtype"] = "Q4"; }, "unknown dtype 'Q4'");
  header_with("offsets that disagree with the shape", [](nlohmann::json& h) {
    h["model.norm.weight"]["shape"] = {65};
  }, "needs 260 bytes");
  header_with("two tensors overlapping", [](nlohmann::json& h) {
    h["model.norm.weight"]["data_offsets"] = h["model.embed_tokens.weight"]["data_offsets"];
    h["model.norm.weight"]["shape"] = h["model.embed_tokens.weight"]["shape"];
    h["model.norm.weight"]["dtype"] = h["model.embed_tokens.weight"]["dtype"];
  }, "overlap");
  header_with("offsets past the data", [](nlohmann::json& h) {
    h["model.norm.weight"]["data_offsets"] = {uint64_t(1) << 50, (uint64_t(1) << 50) + 256};
  }, "spans bytes");
  header_with("a huge shape", [](nlohmann::json& h) {
    h["model.norm.weight"]["shape"] = {uint64_t(1) << 40, uint64_t(1) << 40};
  }, "overflows 64 bits");
  header_with("a missing tensor", [](nlohmann::json& h) { h.erase("model.layers.1.mlp.up_proj.weight"); },
              "lack 'model.layers.1.mlp.up_proj.weight'");
  header_with("a bias", [](nlohmann::json& h) {
    h["model.layers.0.self_attn.q_proj.bias"] = {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {0, 0}}};
  }, "is a bias");
  config_with("another architecture", [](nlohmann::json& c) { c["architectures"] = {"DeepseekV3ForCausalLM"}; },
              "architecture DeepseekV3ForCausalLM is not supported");
  config_with("experts without a count", [](nlohmann::json& c) { c["architectures"] = {"MixtralForCausalLM"}; },
              "num_local_experts must be a positive integer");
  config_with("more experts a token than experts", [](nlohmann::json& c) {
    c["architectures"] = {"Qwen3MoeForCausalLM"};
    c["num_experts"] = 4;
    c["num_experts_per_tok"] = 5;
    c["moe_intermediate_size"] = 32;
  }, "n_experts_used = 5, must be in [1, 4]");
  config_with("a dense layer the model does not have", [](nlohmann::json& c) {
    c["architectures"] = {"Qwen3MoeForCausalLM"};
    c["num_experts"] = 4;
    c["num_experts_per_tok"] = 2;
    c["moe_intermediate_size"] = 32;
    c["mlp_only_layers"] = {7};
  }, "mlp_only_layers names a layer the model does not have");
  config_with("OLMoE's clipped q, k, v", [](nlohmann::json& c) {
    c["architectures"] = {"OlmoeForCausalLM"};
    c["num_experts"] = 4;
    c["num_experts_per_tok"] = 2;
    c["clip_qkv"] = 8.0;
  }, "clipping q, k and v (clip_qkv) is not supported");
  config_with("an unknown rope scaling", [](nlohmann::json& c) { c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; },
              "rope scaling of type 'yarn' is not supported");
  config_with("attention biases", [](nlohmann::json& c) { c["attention_bias"] = true; }, "attention biases");
  config_with("a sliding window of no size", [](nlohmann::json& c) {
    c["architectures"] = {"MistralForCausalLM"};
    c["sliding_window"] = 0;
  }, "sliding_window is not a positive integer");
  config_with("partial rotary embeddings", [](nlohmann::json& c) { c["partial_rotary_factor"] = 0.5; },
              "partial rotary embeddings");
  config_with("Phi-3 without its fused projections", [](nlohmann::json& c) { c["architectures"] = {"Phi3ForCausalLM"}; },
              "lack 'model.layers.0.self_attn.qkv_proj.weight'");
  config_with("Qwen3 without its q and k norms", [](nlohmann::json& c) { c["architectures"] = {"Qwen3ForCausalLM"}; },
              "lack 'model.layers.0.self_attn.q_norm.weight'");
  config_with("a sliding layer without a window", [](nlohmann::json& c) {
    c["architectures"] = {"MistralForCausalLM"};
    c["layer_types"] = {"full_attention", "sliding_attention"};
  }, "sliding_window is not a positive integer");
  config_with("Qwen2 without its biases", [](nlohmann::json& c) {
    c["architectures"] = {"Qwen2ForCausalLM"};
    c["sliding_window"] = 4096;  // set, and unused without use_sliding_window
  }, "lack 'model.layers.0.self_attn.q_proj.bias'");
  config_with("gelu", [](nlohmann::json& c) { c["hidden_act"] = "gelu"; }, "hidden_act 'gelu' is not supported");
  config_with("an unknown layer type", [](nlohmann::json& c) {
    c["architectures"] = {"MistralForCausalLM"};
    c["layer_types"] = {"full_attention", "chunked_attention"};
  }, "a layer type 'chunked_attention'");
  folder_with("JSON nested 100,000 deep", weights,
              "{\"hidden_size\": " + std::string(100000, '[') + std::string(100000, ']') + "}",
              "JSON nested deeper than 64 levels");
  config_with("no hidden_size", [](nlohmann::json& c) { c.erase("hidden_size"); }, "hidden_size is missing");
  config_with("a string for a size", [](nlohmann::json& c) { c["num_hidden_layers"] = "2"; }, "num_hidden_layers is not an integer");
  config_with("a shape the weights do not have", [](nlohmann::json& c) { c["intermediate_size"] = 151; }, "the config says");
  config_with("an eos id past the vocabulary", [](nlohmann::json& c) { c["eos_token_id"] = {2, 5000}; },
              "eos_token_id = 5000 is outside the vocabulary");
  config_with("absurd layers", [](nlohmann::json& c) { c["num_hidden_layers"] = 1LL << 40; }, "n_layers = ");
  folder_with("a config that is not JSON", weights, "{\"hidden_size\": ", "not valid JSON");
  folder_with("a config that is a list", weights, "[1, 2]", "not a JSON object");
  for (const Broken& b : cases) expect_refused(b);
  expect_refused({"a folder with no config", dir.path(), "not a Hugging Face model folder"});
}

// Which layers attend in a sliding window, read as transformers reads it: none for Llama, Mistral's
// and Phi-3's sliding_window in every layer, Qwen's only while use_sliding_window is on (from
// max_window_layers on), layer_types where given, Gemma 3's sliding_window_pattern; the context
// stays the model's own.
TEST(ModelFiles, SlidingWindowsAreReadPerLayer) {
  const nlohmann::json base = {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 64}, {"intermediate_size", 160},
                               {"num_hidden_layers", 4}, {"num_attention_heads", 4}, {"vocab_size", 100},
                               {"max_position_embeddings", 4096}};
  // The window of each layer, 0 for a global one.
  auto windows = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json c = base;
    edit(c);
    const LlamaConfig config = parse_hf_config(c.dump(), "config.json");
    EXPECT_EQ(config.n_ctx, 4096);
    std::vector<int64_t> w;
    for (int64_t l = 0; l < config.n_layers; ++l) w.push_back(config.attention_spec(l).window);
    return w;
  };
  using W = std::vector<int64_t>;
  EXPECT_EQ(windows([](nlohmann::json&) {}), W({0, 0, 0, 0}));
  EXPECT_EQ(windows([](nlohmann::json& c) { c["sliding_window"] = 2047; }), W({0, 0, 0, 0}));  // a Llama
  EXPECT_EQ(windows([](nlohmann::json& c) {
    c["architectures"] = {"Phi3ForCausalLM"};
    c["sliding_window"] = 2047;
  }), W({2047, 2047, 2047, 2047}));
  EXPECT_EQ(windows([](nlohmann::json& c) {
    c["architectures"] = {"MistralForCausalLM"};
    c["sliding_window"] = nullptr;
  }), W({0, 0, 0, 0}));
  EXPECT_EQ(windows([](nlohmann::json& c) {
    c["architectures"] = {"MistralForCausalLM"};
    c["sliding_window"] = 1024;
  }), W({1024, 1024, 1024, 1024}));
  EXPECT_EQ(windows([](nlohmann::json& c) {
    c["architectures"] = {"Qwen2ForCausalLM"};
    c["sliding_window"] = 512;
  }), W({0, 0, 0, 0}));
  EXPECT_EQ(windows([](nlohmann::json& c) {
    c["architectures"] = {"Qwen2ForCausalLM"};
    c["sliding_window"] = 512;
    c["use_sliding_window"] = true;
    c["max_window_layers"] = 2;
  }), W({0, 0, 512, 512}));
  EXPECT_EQ(windows([](nlohmann::json& c) {
    c["architectures"] = {"Qwen3ForCausalLM"};
    c["sliding_window"] = 512;
    c["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "sliding_attention"};
  }), W({0, 0, 0, 0}));  // without use_sliding_window, transformers drops Qwen's window
  EXPECT_EQ(windows([](nlohmann::json& c) {
    c["architectures"] = {"MistralForCausalLM"};
    c["sliding_window"] = 300;
    c["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "sliding_attention"};
  }), W({300, 0, 300, 300}));
  EXPECT_EQ(windows([](nlohmann::json& c) {
    c["architectures"] = {"Gemma3ForCausalLM"};
    c["sliding_window"] = 64;
    c["sliding_window_pattern"] = 2;
  }), W({64, 0, 64, 0}));
  // GGUF's ARCH.attention.sliding_window: the Phi-3 fixture's window of 96 in a context of 128.
  const std::string phi3 = std::string(MINFER_SOURCE_DIR) + "/tests/data/models/phi3-f32.gguf";
  if (!std::filesystem::exists(phi3)) GTEST_SKIP() << "skipped: " << phi3 << " is missing";
  const LlamaConfig c = read_gguf_config(GgufFile(phi3));
  EXPECT_EQ(c.n_ctx, 128);
  EXPECT_EQ(c.attention_spec(0).window, 96);
}

// Gemma 3's config.json, as transformers 4 and 5 write it: its declared differences, and the
// soft-capping and bidirectional attention it does not run refused by name.
TEST(ModelFiles, Gemma3ConfigDeclaresItsDifferences) {
  const nlohmann::json base = {{"architectures", {"Gemma3ForCausalLM"}}, {"hidden_size", 640}, {"intermediate_size", 2048},
                               {"num_hidden_layers", 6}, {"num_attention_heads", 4}, {"num_key_value_heads", 1},
                               {"head_dim", 256}, {"vocab_size", 1000}, {"max_position_embeddings", 32768},
                               {"hidden_activation", "gelu_pytorch_tanh"}, {"query_pre_attn_scalar", 256},
                               {"sliding_window", 512}, {"rope_theta", 1000000.0}, {"rope_local_base_freq", 10000.0},
                               {"final_logit_softcapping", nullptr}, {"attn_logit_softcapping", nullptr}};
  const LlamaConfig c = parse_hf_config(base.dump(), "config.json");
  EXPECT_TRUE(c.qk_norm && c.post_norms && c.shared_classifier);
  EXPECT_EQ(c.activation, GluActivation::gelu_tanh);
  EXPECT_FLOAT_EQ(c.embedding_scale, std::sqrt(640.0f));
  EXPECT_FLOAT_EQ(c.attention_scale, 1.0f / 16.0f);
  EXPECT_EQ(c.head_dim(), 256);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_theta_sliding, 1e4);
  for (int64_t l = 0; l < 6; ++l)  // without layer_types or a pattern: transformers' default of 6
    EXPECT_EQ(c.attention_spec(l).window, l == 5 ? 0 : 512) << "layer " << l;
  nlohmann::json v5 = base;  // transformers 5: layer_types and rope_parameters per layer type
  v5.erase("rope_theta");
  v5.erase("rope_local_base_freq");
  v5["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention",
                       "sliding_attention", "sliding_attention", "full_attention"};
  v5["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1000000.0}}},
                           {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  const LlamaConfig c5 = parse_hf_config(v5.dump(), "config.json");
  EXPECT_EQ(c5.rope_theta, 1e6);
  EXPECT_EQ(c5.rope_scaling.type, RopeScaling::Type::linear);
  EXPECT_EQ(c5.rope_theta_sliding, 1e4);
  EXPECT_EQ(c5.attention_spec(0).window, 512);
  EXPECT_EQ(c5.attention_spec(5).window, 0);
  EXPECT_TRUE(c5.layer_uses_sliding_rope(4) && !c5.layer_uses_sliding_rope(5));
  for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping"}) {
    nlohmann::json capped = base;
    capped[key] = 30.0;
    EXPECT_THROW(parse_hf_config(capped.dump(), "config.json"), Error) << key;
  }
  nlohmann::json bidirectional = base;
  bidirectional["use_bidirectional_attention"] = true;
  EXPECT_THROW(parse_hf_config(bidirectional.dump(), "config.json"), Error);
  nlohmann::json untied = base;
  untied["tie_word_embeddings"] = false;
  EXPECT_FALSE(parse_hf_config(untied.dump(), "config.json").shared_classifier);
  // Keys left out take transformers' Gemma 3 defaults, not Llama's.
  nlohmann::json bare = base;
  for (const char* key : {"hidden_activation", "query_pre_attn_scalar", "rope_theta", "rope_local_base_freq"})
    bare.erase(key);
  const LlamaConfig d = parse_hf_config(bare.dump(), "config.json");
  EXPECT_EQ(d.activation, GluActivation::gelu_tanh);
  EXPECT_FLOAT_EQ(d.attention_scale, 1.0f / 16.0f);
  EXPECT_EQ(d.rope_theta, 1e6);
  EXPECT_EQ(d.rope_theta_sliding, 1e4);
  // A Mistral's sliding layers keep its one RoPE base.
  nlohmann::json mistral = {{"architectures", {"MistralForCausalLM"}}, {"hidden_size", 64}, {"intermediate_size", 160},
                            {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"vocab_size", 100},
                            {"max_position_embeddings", 4096}, {"sliding_window", 1024}};
  EXPECT_EQ(parse_hf_config(mistral.dump(), "config.json").rope_theta_sliding, 0.0);
}

TEST(ModelFiles, MalformedGgufFilesAreRefusedWithOneLine) {
  ScratchDir dir("broken-gguf");
  LlamaHostWeights w = random_llama_weights(base_config(4, 2, false), 5, 1.0);
  const std::string good_path = dir.file("good.gguf");
  write_gguf(good_path, w, DType::f16, nullptr);
  const std::string good = slurp(good_path);
  std::vector<Broken> cases;
  int counter = 0;
  auto file_with = [&](const std::string& what, const std::string& bytes, const std::string& fragment) {
    const std::string p = dir.file("case" + std::to_string(counter++) + ".gguf");
    spit(p, bytes);
    cases.push_back({what, p, fragment});
  };
  auto patched = [&](size_t at, const void* value, size_t n) {
    std::string b = good;
    std::memcpy(b.data() + at, value, n);
    return b;
  };
  for (size_t cut : {size_t(6), size_t(20), size_t(200), good.size() / 3, good.size() - 16})
    file_with("truncated at " + std::to_string(cut), good.substr(0, cut),
              cut < 24 ? "the file ends inside" : cut < 2000 ? "the file ends" : "spans bytes");
  const uint32_t v4 = 4;
  file_with("version 4", patched(4, &v4, 4), "GGUF version 4 is not supported");
  const uint64_t huge = uint64_t(1) << 60;
  file_with("2^60 tensors", patched(8, &huge, 8), "tensors (limit");
  file_with("2^60 metadata keys", patched(16, &huge, 8), "metadata keys (limit");
  file_with("a key of 2^60 bytes", patched(24, &huge, 8), "is a string of");
  // The first key is general.architecture (a string): its value's length sits after the key
  // (8 + 20 bytes) and its type (4 bytes).
  file_with("a value of 2^60 bytes", patched(24 + 8 + 20 + 4, &huge, 8), "is a string of");
  {
    std::string b = good;
    const std::string arch = "llama";
    b.replace(b.find(arch), arch.size(), "gemma");
    file_with("another architecture", b, "architecture 'gemma' is not supported");
  }
  {
    std::string b = good;
    const std::string key = "llama.block_count";
    b.replace(b.find(key), key.size(), "llama.block_cxunt");
    file_with("a missing key", b, "metadata 'llama.block_count' is missing");
  }
  {
    // token_embd.weight is the first tensor: its info follows the metadata; its type sits after
    // the name (8 + 17 bytes), the dimension count (4) and two dimensions (16).
    std::string b = good;
    const size_t info = b.find("token_embd.weight") - 8;
    const uint32_t iq4_nl = 20, q4_k = 12;
    std::memcpy(b.data() + info + 8 + 17 + 4 + 16, &iq4_nl, 4);
    file_with("an IQ4_NL tensor", b, "is IQ4_NL; minfer reads F32, F16, BF16, Q4_0");
    std::memcpy(b.data() + info + 8 + 17 + 4 + 16, &q4_k, 4);
    file_with("a Q4_K tensor of 64-wide rows", b, "of type Q4_K has rows of 64, not a multiple of its 256-element blocks");
    std::string c = good;
    const uint32_t five = 5;
    std::memcpy(c.data() + info + 8 + 17, &five, 4);
    file_with("five dimensions", c, "has 5 dimensions");
    std::string d = good;
    const uint64_t misaligned = 3;
    std::memcpy(d.data() + info + 8 + 17 + 4 + 16 + 4, &misaligned, 8);
    file_with("a misaligned offset", d, "not aligned");
  }
  file_with("not GGUF at all but named .gguf", std::string(64, 'x'), "dim = 2021161080");
  // The families' files (the fixtures llama.cpp's converter wrote), each broken once: a key's
  // value sits after the key's name and its type (4 bytes).
  const std::string models = std::string(MINFER_SOURCE_DIR) + "/tests/data/models/";
  if (std::filesystem::exists(models + "qwen2-f32.gguf") && std::filesystem::exists(models + "phi3-f32.gguf")) {
    std::string qwen2 = slurp(models + "qwen2-f32.gguf");
    const std::string bias = "blk.0.attn_q.bias";
    qwen2.replace(qwen2.find(bias), bias.size(), "blk.0.attn_x.bias");
    file_with("a bias Qwen2 does not have", qwen2, "tensor 'blk.0.attn_x.bias' is not part of a qwen2 model");
    const std::string phi3 = slurp(models + "phi3-f32.gguf");
    auto phi3_with = [&](const std::string& key, uint32_t value) {
      std::string b = phi3;
      std::memcpy(b.data() + b.find(key) + key.size() + 4, &value, 4);
      return b;
    };
    file_with("partial rotary", phi3_with("phi3.rope.dimension_count", 8), "RoPE over 8 of a head's 16 dimensions");
    file_with("a fused qkv of other rows", phi3_with("phi3.attention.head_count_kv", 2),
              "does not hold the config's q | k | v");
  }
  // A mixture of experts' counts, each broken once: more experts a token than the layer has, more
  // than a router takes, and a count the expert tensors do not hold.
  if (std::filesystem::exists(models + "qwen3moe-f32.gguf")) {
    const std::string moe = slurp(models + "qwen3moe-f32.gguf");
    auto moe_with = [&](const std::string& key, uint32_t value) {
      std::string b = moe;
      std::memcpy(b.data() + b.find(key) + key.size() + 4, &value, 4);
      return b;
    };
    file_with("more experts a token than experts", moe_with("qwen3moe.expert_used_count", 9),
              "n_experts_used = 9, must be in [1, 8]");
    file_with("too many experts", moe_with("qwen3moe.expert_count", 5000), "n_experts = 5000, must be in [1, 1024]");
    file_with("experts the tensors do not hold", moe_with("qwen3moe.expert_count", 16),
              "blk.0.ffn_*_exps f32[8, 32, 64] cpu does not hold the config's 16 experts");
  }
  for (const Broken& b : cases) expect_refused(b);
}

}  // namespace
}  // namespace minfer::test

namespace minfer::test {
namespace {

// The writers write Llama models: each family's declared difference is refused by name rather
// than dropped from the file.
TEST(ModelFiles, WritersRefuseWhatAFileWouldLose) {
  ScratchDir dir("writers-refuse");
  const std::vector<std::pair<std::function<void(LlamaConfig&)>, std::string>> features = {
      {[](LlamaConfig& c) { c.qkv_bias = true; }, "q, k and v biases"},
      {[](LlamaConfig& c) { c.qk_norm = true; }, "q and k norms"},
      {[](LlamaConfig& c) { c.post_norms = true; }, "post norms"},
      {[](LlamaConfig& c) { c.activation = GluActivation::gelu_tanh; }, "GeGLU"},
      {[](LlamaConfig& c) { c.embedding_scale = 8.0f; }, "an embedding scale"},
      {[](LlamaConfig& c) { c.attention_scale = 0.25f; }, "an attention scale"},
      {[](LlamaConfig& c) { c.sliding_window = 4; }, "a sliding window"},
  };
  for (const auto& [set, name] : features) {
    LlamaConfig c = base_config(4, 2, true);
    set(c);
    const LlamaHostWeights w = random_llama_weights(c, 3, 1.0);
    for (int format = 0; format < 2; ++format) {
      try {
        if (format == 0) write_gguf(dir.file("x.gguf"), w, DType::f32, nullptr);
        else write_hf_folder(dir.file("x"), w, DType::f32);
        ADD_FAILURE() << name << " was written";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(name + " ("), std::string::npos) << e.what();
      }
    }
  }
  LlamaHostWeights offset = random_llama_weights(base_config(4, 2, true), 3, 1.0);
  offset.norm_weight_offset = 1.0f;
  EXPECT_THROW(write_gguf(dir.file("y.gguf"), offset, DType::f32, nullptr), Error);
}

}  // namespace
}  // namespace minfer::test
