// The sampler's flags past --temp and --top-p, shared by `minfer generate` and `minfer chat`, with
// llama.cpp's names: --top-k, --min-p, --presence-penalty, --frequency-penalty, --repeat-penalty and
// --logit-bias (engine/sampler.h says what each does).
#pragma once

#include <vector>

#include "cli/args.h"
#include "engine/sampler.h"

namespace minfer::cli {

std::vector<Option> sampling_flag_options();
// The flags' settings, each checked (a token id against the vocabulary later, by the sampler).
SamplingOptions sampling_flags(const Args& args);

}  // namespace minfer::cli
