#include "engine/static_batches.h"

#include <algorithm>

namespace minfer {

bool StaticBatches::may_admit(bool every_slot_free) {
  if (every_slot_free) std::fill(finished_.begin(), finished_.end(), 0);
  return every_slot_free;
}

int64_t StaticBatches::add_finished_rows(Decoder& decoder, std::vector<Decoder::Chunk>& chunks) {
  int64_t rows = 0;
  for (int64_t s = 0; s < static_cast<int64_t>(finished_.size()); ++s) {
    if (!finished_[static_cast<size_t>(s)]) continue;
    if (decoder.position(s) >= decoder.n_ctx()) decoder.reset_sequence(s);
    chunks.push_back({s, &padding_token_, 1, true});
    ++rows;
  }
  return rows;
}

}  // namespace minfer
