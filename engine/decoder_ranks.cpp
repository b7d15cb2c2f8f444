// A decoder that leads other ranks, and one that follows (Decoder::lead and Decoder::follow; issue 54).
//
// Under tensor parallelism every rank runs every forward pass on its part of the model: the passes
// hold the collectives (two all-reduces a layer, the logits' gather), so the ranks must enter them
// together, with the same rows. When the passes follow from the command's arguments alone, every
// rank computes them itself. When they follow from what rank 0 reads (a chat turn, HTTP requests
// and their scheduling), rank 0 sends each pass before running it, as vLLM's driver sends each
// step's metadata to its workers. A pass is all a decoder's state that the device sees: the
// staged rows (tokens, sequences, positions, the rows whose logits are wanted) and the block
// table. Positions, rewinds and the block pool stay rank 0's own: a pass carries its positions,
// and a table row that changed is sent before the pass that reads it.
#include <cstdint>

#include "core/error.h"
#include "engine/decoder.h"

namespace minfer {

namespace {

// A step's header: what it is, then its numbers.
enum StepField : int64_t { kWhat, kRows, kFirstLogitRow, kLogitRows, kRecorded, kTableChanged, kStepFields };
enum StepKind : int32_t { kEnd = 0, kPass = 1, kCopy = 2 };  // a copy: kRows is dst, kFirstLogitRow src

// The header, its numbers zeroed and `what` set.
int32_t* new_header(const Tensor& header, StepKind what) {
  int32_t* fields = header.data_as<int32_t>();
  for (int64_t i = 0; i < kStepFields; ++i) fields[i] = 0;
  fields[kWhat] = what;
  return fields;
}

}  // namespace

void Decoder::lead(Communicator& ranks) {
  MINFER_CHECK(ranks.rank() == 0, "a decoder leads from rank 0, not rank ", ranks.rank());
  MINFER_CHECK(ranks.device() == DeviceKind::cpu, "a decoder leads ranks over host memory, not ",
               device_name(ranks.device()));
  step_header_ = backend_.empty_host({kStepFields}, DType::i32);
  leads_ = &ranks;
}

void Decoder::end_following() {
  if (leads_ == nullptr) return;
  new_header(step_header_, kEnd);
  leads_->broadcast(step_header_, 0);
  leads_ = nullptr;
}

void Decoder::broadcast_pass(int64_t n_rows, int64_t first_logit_row, int64_t n_logit_rows, bool recorded) {
  int32_t* header = new_header(step_header_, kPass);
  header[kRows] = static_cast<int32_t>(n_rows);  // at most pass_rows_, an int32 (the staging buffer)
  header[kFirstLogitRow] = static_cast<int32_t>(first_logit_row);
  header[kLogitRows] = static_cast<int32_t>(n_logit_rows);
  header[kRecorded] = recorded ? 1 : 0;
  header[kTableChanged] = cache_.table_changed() ? 1 : 0;
  leads_->broadcast(step_header_, 0);
  leads_->broadcast(staging_.slice(0, 0, 3 * n_rows + n_logit_rows), 0);
  if (cache_.table_changed()) cache_.broadcast_table(*leads_);
}

void Decoder::broadcast_copy(int32_t dst, int32_t src) {
  int32_t* header = new_header(step_header_, kCopy);
  header[kRows] = dst;
  header[kFirstLogitRow] = src;
  leads_->broadcast(step_header_, 0);
}

void Decoder::follow(Communicator& ranks) {
  MINFER_CHECK(ranks.rank() != 0, "rank 0 leads; the other ranks follow");
  step_header_ = backend_.empty_host({kStepFields}, DType::i32);
  const int32_t* header = step_header_.data_as<int32_t>();
  for (;;) {
    ranks.broadcast(step_header_, 0);
    switch (header[kWhat]) {
      case kEnd:
        backend_.synchronize();
        return;
      case kCopy:
        copy_block(header[kRows], header[kFirstLogitRow]);
        break;
      case kPass: {
        const int64_t n_rows = header[kRows], n_logit_rows = header[kLogitRows];
        MINFER_CHECK(n_rows >= 1 && n_rows <= pass_rows_ && n_logit_rows >= 0 && n_logit_rows <= logit_rows_ &&
                         header[kFirstLogitRow] >= 0 && header[kFirstLogitRow] + n_logit_rows <= logit_rows_,
                     "rank 0's pass of ", n_rows, " rows and ", n_logit_rows,
                     " logits does not fit this rank's decoder (", pass_rows_, " rows, ", logit_rows_,
                     " logits): were both made with the same options?");
        backend_.synchronize();  // the last pass's copy of the staging buffer has happened
        ranks.broadcast(staging_.slice(0, 0, 3 * n_rows + n_logit_rows), 0);
        if (header[kTableChanged] != 0) cache_.broadcast_table(ranks);
        run_rows(n_rows, header[kFirstLogitRow], n_logit_rows, header[kRecorded] != 0 ? &decode_key() : nullptr);
        break;
      }
      default:
        fail("step ", header[kWhat], " from rank 0 is none a decoder takes");
    }
  }
}

}  // namespace minfer
