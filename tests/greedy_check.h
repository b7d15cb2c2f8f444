// Comparing greedy tokens between two backends or two settings where only rounding differs.
//
// Random-weight models have near-ties often enough that a different summation order flips a
// token, and from then on the two runs diverge; exact equality of long id sequences is then a
// test of luck, not of correctness. The rule here: run greedily, record at every step the margin
// between the best and second-best logit of the reference run, and require equal ids only up to
// the first step where that margin is below a threshold chosen for the precision compared.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "model/llama.h"

namespace minfer::test {

struct GreedyRun {
  std::vector<int32_t> ids;     // ids[i]: the greedy token after step i
  std::vector<double> margins;  // margins[i]: best minus second-best logit at step i
  std::vector<float> first_logits;  // the logits after the prompt
};

// Prefills `prompt` (batched, or a token per forward pass) and decodes `steps` greedy tokens.
GreedyRun greedy_run(Backend& backend, const std::string& spec, const LlamaOptions& options,
                     const std::vector<int32_t>& prompt, int steps, bool one_by_one = false);

// Expects actual.ids == reference.ids up to the first step where the reference margin is below
// `min_margin`; returns how many steps were compared.
size_t expect_same_ids_where_decisive(const GreedyRun& reference, const GreedyRun& actual, double min_margin,
                                      const std::string& label);

}  // namespace minfer::test
