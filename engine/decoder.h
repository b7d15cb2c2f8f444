// The decoder: batched prefill, token-by-token decode, and the generation loop around them.
//
// A decoder serves n_seqs independent sequences at once. Prefill runs every prompt position of every
// sequence through the model in one forward pass (matrix-matrix products over all rows, causal
// attention over the cache), in chunks of at most pass_rows rows, and asks for logits only
// at each sequence's last prompt position. Decode then feeds one token per sequence per step: one
// forward pass over n_seqs rows, so each weight matrix is read once per step for all of them.
//
// Everything is allocated when the decoder is created: the KV cache, the model's activations for
// the largest batch, the logits, and the host/device buffers for token ids and positions. A
// decode step allocates nothing, from the pool or the heap (tests/test_decoder.cpp and, for the
// heap on the CPU, tests/heap/test_decode_heap.cpp).
//
// Before every pass, on every backend, the host checks each row's position against the block
// table (a -1 entry or a position past the table is refused with one line before any op runs) and
// copies a table that changed to the device; neither is ever part of recorded work, so a recorded
// decode step sees a table set after it was recorded (tests/test_gpu_error_paths.cpp). A decoder
// destroyed after a device error reports it on stderr and does not throw.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/communicator.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/sampler.h"

namespace minfer {

struct DecoderOptions {
  int64_t n_seqs = 1;               // the sequences decoded together (the batch size, -B)
  int64_t n_ctx = 0;                // a sequence's context (--ctx), at most the model's; 0 = the model's
  // Rows per forward pass at most (prefill chunks, continuous batching's mixed steps). The decoder
  // raises it to n_seqs x logits_per_seq if smaller, since a decode step of every sequence is one
  // pass whatever this says; Decoder::pass_rows() is the limit it keeps.
  int64_t pass_rows = 2048;
  // The KV cache's type. Unset: default_kv_dtype.
  std::optional<DType> kv_dtype;
  // 0: every sequence owns a whole context of blocks (contiguous tables). Otherwise a pool of this
  // many blocks whose tables the caller sets (set_blocks), as the server's scheduler does.
  int64_t kv_blocks = 0;
  // Positions per block (KvCache: a context shorter than this is one block).
  int64_t kv_block_size = KvCache::kDefaultBlockSize;
  // Room for the logits of every row of a prefill chunk (pass_rows x vocab, on the device
  // and the host), which prefill_scored needs; otherwise one row per sequence.
  bool logits_every_row = false;
  // Room for the logits of this many rows of each sequence in one forward_chunks() pass: a
  // speculative verify pass (engine/speculative.h) wants k + 1 per sequence.
  int64_t logits_per_seq = 1;
  // Logits rows beyond n_seqs x logits_per_seq (0 to 4096; no more than pass_rows in all), for
  // chunks with every_row in forward_chunks(): the scheduler's prompt logprobs (kPromptLogitsRows).
  int64_t extra_logit_rows = 0;
};

// The KV cache's type when none is asked for: f32 on the CPU; on CUDA the weights' type for f32,
// f16 and bf16 models (a 16-bit model keeps 16-bit keys and values, halving the cache's bytes), and
// f16 for every quantized one (a block format is no format for keys and values written a row at
// a time).
DType default_kv_dtype(DeviceKind device, DType weights);

// How many tokens of `held` (what a sequence of the cache holds) begin `prompt`, short of the
// prompt's last token, whose logits are wanted: the positions a prompt cache keeps (rewind to
// them, then prefill the rest). `minfer chat` reuses its one sequence so; the server finds cached
// blocks by their tokens instead (engine/block_pool.h).
int64_t reusable_prefix(const std::vector<int32_t>& held, const std::vector<int32_t>& prompt);

struct GenerateOptions {
  int64_t n_new = 256;         // new tokens per sequence after the prompt
  // 0: greedy, the library's deterministic default; `minfer generate --temp` defaults to 1.0,
  // run.c's default, and `minfer naive` to 0 like this.
  float temperature = 0.0f;
  float top_p = 0.9f;
  // top_k, min_p, the penalties and logit_bias (engine/sampler.h); not taken by speculative decoding
  SamplingOptions sampling;
  uint64_t seed = 1;           // sequence i samples with seed + i
  // Stop a sequence when it produces one of the model's stop tokens (ModelInfo::stop_ids: BOS
  // or EOS for a llama2.c model, as run.c stops; the eos_token_id(s) of a Hugging Face model).
  bool stop_at_eos = true;
  bool prefill_one_by_one = false;  // feed the prompt a token per forward pass (run.c's way)
};

struct GenerateResult {
  std::vector<std::vector<int32_t>> tokens;  // per sequence, the generated ids (no stop token)
  int64_t prompt_tokens = 0;    // over all sequences
  double prefill_seconds = 0.0;
  int64_t decode_steps = 0;
  int64_t decode_tokens = 0;    // tokens fed through decode steps, over all sequences
  double decode_seconds = 0.0;
  // Speculative decoding (engine/speculative.h): the drafter's passes, the tokens it drafted and
  // those the target accepted. decode_steps are then the target's verify passes.
  int64_t draft_passes = 0;
  int64_t drafted_tokens = 0;
  int64_t accepted_tokens = 0;
};

class Decoder {
 public:
  Decoder(Model& model, const DecoderOptions& options);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  int64_t n_seqs() const { return n_seqs_; }
  int64_t n_ctx() const { return cache_.n_ctx(); }
  int64_t vocab_size() const { return vocab_; }
  int64_t max_logits_per_seq() const { return logits_per_seq_; }
  int64_t logit_rows() const { return logit_rows_; }  // logits rows a forward pass may ask for
  int64_t pass_rows() const { return pass_rows_; }  // rows per forward pass at most
  const std::vector<int32_t>& stop_ids() const { return model_.info().stop_ids; }
  const KvCache& cache() const { return cache_; }
  int64_t position(int64_t seq) const { return n_past_[seq]; }
  // Forgets every sequence (positions back to 0); the memory stays.
  void reset();

  // Appends prompts[s] to sequence s (all n_seqs of them) in batched passes of at most pass_rows
  // rows (one pass when they fit). Afterwards logits(s) are the next-token logits after the last
  // prompt token.
  void prefill(const std::vector<std::vector<int32_t>>& prompts);
  // Appends `tokens` to sequence `seq` with the logits of every position: on_logits(i, row) is
  // called for each i in order, `row` being the vocab logits after tokens[i] (host memory, valid
  // during the call). Runs pass_rows positions per forward pass; needs logits_every_row.
  void prefill_scored(int64_t seq, const std::vector<int32_t>& tokens,
                      const std::function<void(int64_t, const float*)>& on_logits);
  // Rows of one sequence for forward_chunks(): `n` tokens appended at its current position; with
  // `logits`, the next-token logits after the last of them are wanted; with `every_row`, those
  // after each of them (n logits rows, in order: a speculative verify pass).
  struct Chunk {
    int64_t seq;
    const int32_t* tokens;
    int64_t n;
    bool logits;
    bool every_row = false;
  };
  // One forward pass over chunks of any sequences, each sequence at most once, at most
  // pass_rows rows in all (continuous batching mixes decode rows and prompt chunks this
  // way). The logits of the chunks that want them go to rows 0, 1, ... in chunk order
  // (logits_row, argmax_rows). Not recorded as a CUDA Graph: its shape changes every step.
  void forward_chunks(const std::vector<Chunk>& chunks);
  // The logits in row `row` of the last forward pass (host memory, fetched if needed).
  float* logits_row(int64_t row);
  // The greedy choice of logits rows 0 .. n-1, computed on the device.
  void argmax_rows(int64_t n, std::vector<int32_t>* out);
  // Forgets sequence `seq` (position back to 0); its blocks are reused as they are.
  void reset_sequence(int64_t seq);
  // Takes sequence `seq` back to `n_past` positions (at most where it is): the positions after it
  // are forgotten, nothing is copied, and the next pass overwrites their keys and values. A
  // speculative round rolls back its rejected draft tokens this way.
  void rewind(int64_t seq, int64_t n_past);
  // Paged caches (kv_blocks > 0): sequence `seq`'s block table becomes blocks[0..n) and it holds
  // n_past positions, the first n_past rows of those blocks (at most n * block size). A pass may
  // then write its positions up to n * block size; the next pass, recorded or not, copies the
  // table to the device first and refuses a position whose blocks include a -1.
  void set_blocks(int64_t seq, const int32_t* blocks, int64_t n, int64_t n_past);
  // Copies block src's keys and values into block dst, before the next pass (copy on write).
  void copy_block(int32_t dst, int32_t src);
  // Appends tokens[s] to sequence s, one forward pass over n_seqs rows.
  void decode(const std::vector<int32_t>& tokens);
  // Brings every sequence's next-token logits to the host and waits for them (a no-op when they
  // are there already). Part of a timed decode step when sampling needs them.
  void fetch_logits();
  // The next-token logits of sequence s (vocab floats on the host), fetched if needed, after
  // prefill() or decode(); after forward_chunks() the rows are chunks: Error, use logits_row.
  float* logits(int64_t seq);
  // The greedy choice for every sequence, computed on the device (only n_seqs ids are copied back).
  void argmax(std::vector<int32_t>* out);

  // Tensor parallelism with rank 0 in charge (issue 54: `minfer chat` and `serve` under mpirun,
  // where rank 0 alone reads requests). Every rank makes a decoder with the same options on its
  // part of the model. Rank 0's leads: before each forward pass it broadcasts the pass (the
  // staged rows and which logits are wanted; the block table too when a row changed), and each
  // block copy, to the others. Their decoders follow: each runs the same pass on its heads and
  // hidden units, taking part in the model's all-reduces and its logits' gather, until rank 0
  // ends the following. Only rank 0 samples. (generate, bench and perplexity need none of this:
  // every rank runs them in step from the arguments alone, cli/cli_ranks.h.)
  void lead(Communicator& ranks);
  void follow(Communicator& ranks);  // returns when the leader calls end_following()
  void end_following();

  // Generates n_new tokens for every sequence after its prompt; on_token(seq, id) is called as
  // each token is produced. Throws Error before any work if a prompt plus the new tokens need
  // more positions than the context.
  GenerateResult generate(const std::vector<std::vector<int32_t>>& prompts,
                          const GenerateOptions& options,
                          const std::function<void(int64_t, int32_t)>& on_token = nullptr);

 private:
  // Runs the batch staged for n_rows rows (recorded under *recording_key when one is given).
  void run_rows(int64_t n_rows, int64_t first_logit_row, int64_t n_logit_rows,
                const std::string* recording_key = nullptr);
  void check_token(int32_t token) const;
  // The positions sequence `seq` may reach: the context, or fewer when its blocks hold fewer.
  int64_t room(int64_t seq) const;
  bool is_stop(int32_t token) const;
  const std::string& decode_key();  // the recording key of a decode step, for the graph epoch
  // Rank 0's side of lead(): the step's header, then its payload (decoder_ranks.cpp).
  void broadcast_pass(int64_t n_rows, int64_t first_logit_row, int64_t n_logit_rows, bool recorded);
  void broadcast_copy(int32_t dst, int32_t src);

  // note: a decode step's work is the same at every position (positions live on the device), so
  // it is run through Backend::run_recorded: with CUDA Graphs on, hundreds of kernel launches
  // become one graph launch. Keys carry this decoder's id and the model's graph epoch. The host's
  // part of a step (run_rows: the rows' check, the table's copy) runs outside the recording.
  std::string recording_prefix_;
  std::string decode_key_;  // recording_prefix_ + "decode@" + epoch, rebuilt when it changes
  uint64_t decode_key_epoch_ = ~uint64_t(0);

  Model& model_;
  Backend& backend_;
  int64_t n_seqs_, vocab_, pass_rows_;
  int64_t logits_per_seq_;
  // Rows of logits_: n_seqs_ x logits_per_seq + extra_logit_rows (at most pass_rows_), or pass_rows_
  // with logits_every_row.
  int64_t logit_rows_;
  KvCache cache_;
  std::vector<int64_t> n_past_;
  Tensor staging_;      // host i32: tokens, seq, pos (pass_rows each), logit rows (logit_rows)
  Tensor batch_;        // the same on the device
  // note: row s of the logits is sequence s after prefill() and decode(), and the s-th chunk
  // that asked for logits after forward_chunks(); rows_are_sequences_ says which.
  Tensor logits_;       // (logit_rows, vocab) on the device
  Tensor host_logits_;  // (logit_rows, vocab) on the host (the same tensor on the CPU backend)
  Tensor argmax_;       // (logit_rows) i32 on the device
  Tensor host_argmax_;  // (logit_rows) i32 on the host
  bool host_logits_valid_ = false;
  bool rows_are_sequences_ = true;
  // note: a led step is a header of kStepFields i32 (what, then its numbers) and, for a pass,
  // the staged rows it names: two broadcasts (three when the table changed), none allocating.
  Communicator* leads_ = nullptr;  // the ranks this decoder leads (lead()), if any
  Tensor step_header_;             // (kStepFields) i32 on the host, on a leader or follower
  std::vector<Sampler> samplers_;
  std::vector<int32_t> next_;
};

// The error for a request that does not fit: "P + N - 1 = X positions > context C". The one
// context check of the decoder, the CLI and the scheduler.
void check_fits_context(int64_t prompt_tokens, int64_t n_new, int64_t n_ctx);

}  // namespace minfer
