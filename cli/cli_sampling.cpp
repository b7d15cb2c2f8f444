#include "cli/cli_sampling.h"

#include <cstdint>
#include <string>

#include "core/error.h"

namespace minfer::cli {

namespace {

// llama.cpp's form: ID+BIAS or ID-BIAS, e.g. 15043+1 or 15043-1.5; the bias in [-100, 100].
LogitBias parse_logit_bias(const std::string& text) {
  const size_t sign = text.find_first_of("+-", 1);
  MINFER_CHECK(sign != std::string::npos, "--logit-bias: '", text, "' is not ID+BIAS or ID-BIAS (e.g. 15043+1)");
  const int64_t id = parse_int(text.substr(0, sign), "--logit-bias's token id", 0, INT32_MAX);
  const double bias = parse_double(text.substr(sign), "--logit-bias's bias", -100.0, 100.0);
  return {static_cast<int32_t>(id), static_cast<float>(bias)};
}

}  // namespace

std::vector<Option> sampling_flag_options() {
  return {
      {"--top-k", "K", "sample from the K most likely tokens only; 0 (the default) keeps every token"},
      {"--min-p", "P", "drop tokens less than P times as likely as the most likely, P in [0, 1]\n"
                       "                              (default 0: none)"},
      {"--presence-penalty", "A", "subtract A from the logit of every token generated so far, A in\n"
                                  "                              [-2, 2] (OpenAI's; default 0)"},
      {"--frequency-penalty", "A", "subtract A times the count of each token generated so far, A in\n"
                                   "                              [-2, 2] (OpenAI's; default 0)"},
      {"--repeat-penalty", "R", "divide the positive logits (multiply the negative ones) of the tokens\n"
                                "                              in the prompt and generated so far by R > 0 (vLLM's\n"
                                "                              reach; llama.cpp's covers the last 64; default 1: none)"},
      {"--logit-bias", "ID(+|-)B", "add B in [-100, 100] to token ID's logit, e.g. 15043+1 or 15043-1;\n"
                                   "                              repeatable, at most 300",
       true},
  };
}

SamplingOptions sampling_flags(const Args& args) {
  SamplingOptions o;
  o.top_k = args.get_int("--top-k", 0, 0, INT32_MAX);
  o.min_p = static_cast<float>(args.get_double("--min-p", 0.0, 0.0, 1.0));
  o.presence_penalty = static_cast<float>(args.get_double("--presence-penalty", 0.0, -2.0, 2.0));
  o.frequency_penalty = static_cast<float>(args.get_double("--frequency-penalty", 0.0, -2.0, 2.0));
  o.repetition_penalty = static_cast<float>(args.get_double("--repeat-penalty", 1.0, 0.0, 1e6));
  MINFER_CHECK(o.repetition_penalty > 0.0f, "--repeat-penalty: ", o.repetition_penalty, " is outside (0, 1e6]");
  const std::vector<std::string> biases = args.get_all("--logit-bias");
  MINFER_CHECK(biases.size() <= SamplingOptions::kMaxLogitBias, "--logit-bias: given ", biases.size(),
               " times; at most ", SamplingOptions::kMaxLogitBias);
  for (const std::string& b : biases) o.logit_bias.push_back(parse_logit_bias(b));
  return o;
}

}  // namespace minfer::cli
