// Static batching, the policy the continuous scheduler (engine/scheduler.h) is compared against.
//
// A server without per-step scheduling admits requests only when every slot is free, S at a time,
// and runs the batch as one tensor of fixed shape: a finished sequence keeps its row in every step
// (its outputs are thrown away) until the longest of the batch ends, as `minfer generate --batch`
// and `bench -B` do with a Decoder directly (Decoder::generate), and as a padded batch does in
// transformers. With SchedulerOptions::Policy::static_batches the scheduler asks this object when
// to admit and which extra rows a step carries; the `continuous` lesson compares the two policies.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/decoder.h"

namespace minfer {

class StaticBatches {
 public:
  explicit StaticBatches(int64_t slots) : finished_(static_cast<size_t>(slots), 0) {}

  // Whether waiting requests may take slots now: only when every slot is free, which ends the
  // batch that ran (its finished rows stop computing).
  bool may_admit(bool every_slot_free);
  // The request in `slot` ended; its row goes on computing until the batch is over.
  void finished(int64_t slot) { finished_[static_cast<size_t>(slot)] = 1; }
  // Appends a decode row for every finished sequence of the running batch: a row at its next
  // position, attending to its whole cache, with logits that nothing samples. One that reaches the
  // end of its slot's context starts over at position 0. Returns the rows added.
  int64_t add_finished_rows(Decoder& decoder, std::vector<Decoder::Chunk>& chunks);

 private:
  std::vector<char> finished_;  // per slot: its request ended, its row still computes
  int32_t padding_token_ = 0;   // what a finished row feeds
};

}  // namespace minfer
