#include "tests/greedy_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "engine/decoder.h"
#include "formats/model_files.h"

namespace minfer::test {

GreedyRun greedy_run(Backend& backend, const std::string& spec, const LlamaOptions& options,
                     const std::vector<int32_t>& prompt, int steps, bool one_by_one) {
  auto model = load_model(spec, backend, options);
  DecoderOptions dec;
  dec.n_ctx = static_cast<int64_t>(prompt.size()) + steps;
  Decoder decoder(*model, dec);
  if (one_by_one) {
    decoder.prefill({{prompt[0]}});
    for (size_t i = 1; i < prompt.size(); ++i) decoder.decode({prompt[i]});
  } else {
    decoder.prefill({prompt});
  }
  GreedyRun run;
  const int64_t vocab = model->info().vocab_size;
  for (int i = 0; i < steps; ++i) {
    const float* l = decoder.logits(0);
    if (i == 0) run.first_logits.assign(l, l + vocab);
    std::vector<float> top(l, l + vocab);
    std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
    run.margins.push_back(double(top[0]) - double(top[1]));
    std::vector<int32_t> next;
    decoder.argmax(&next);
    run.ids.push_back(next[0]);
    if (i + 1 < steps) decoder.decode(next);
  }
  return run;
}

size_t expect_same_ids_where_decisive(const GreedyRun& reference, const GreedyRun& actual, double min_margin,
                                      const std::string& label) {
  size_t step = 0;
  for (; step < reference.ids.size() && step < actual.ids.size() && reference.margins[step] >= min_margin; ++step)
    EXPECT_EQ(actual.ids[step], reference.ids[step])
        << label << ": step " << step << " (reference margin " << reference.margins[step] << ")";
  return step;
}

}  // namespace minfer::test
