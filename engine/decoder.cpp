#include "engine/decoder.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>

#include "core/checked.h"
#include "core/clock.h"
#include "core/error.h"

namespace minfer {

namespace {

// The staging buffer's layout, one array after another: tokens, sequences and positions of up to
// `stride` rows, then the logit rows (the rows whose logits are wanted). Every writer goes
// through it; run_rows packs the arrays for the device.
struct StagedRows {
  int32_t* host;   // the staging buffer
  int64_t stride;  // slots per array
  void put(int64_t row, int32_t token, int64_t seq, int64_t pos) const {
    host[row] = token;
    host[stride + row] = static_cast<int32_t>(seq);
    host[2 * stride + row] = static_cast<int32_t>(pos);
  }
  void logit_row(int64_t i, int64_t row) const { host[3 * stride + i] = static_cast<int32_t>(row); }
};

}  // namespace

void check_fits_context(int64_t prompt_tokens, int64_t n_new, int64_t n_ctx) {
  // The last generated token is never fed back: P prompt tokens and N new ones take P + N - 1
  // forward positions (exactly what run.c allows).
  const int64_t needed = prompt_tokens + std::max<int64_t>(n_new, 1) - 1;
  if (needed > n_ctx)
    fail("prompt of ", prompt_tokens, " tokens + ", n_new, " new tokens needs ", prompt_tokens, " + ",
         n_new, " - 1 = ", needed, " positions > context ", n_ctx);
}

int64_t reusable_prefix(const std::vector<int32_t>& held, const std::vector<int32_t>& prompt) {
  if (prompt.empty()) return 0;
  const auto limit = static_cast<std::ptrdiff_t>(std::min(held.size(), prompt.size() - 1));
  return std::mismatch(held.begin(), held.begin() + limit, prompt.begin()).first - held.begin();
}

DType default_kv_dtype(DeviceKind device, DType weights) {
  if (device != DeviceKind::cuda) return DType::f32;
  return is_quantized(weights) ? DType::f16 : weights;
}

Decoder::Decoder(Model& model, const DecoderOptions& options)
    : model_(model), backend_(model.backend()), n_seqs_(options.n_seqs),
      vocab_(model.info().vocab_size) {
  const ModelInfo& info = model.info();
  const int64_t n_ctx = options.n_ctx > 0 ? options.n_ctx : info.n_ctx;
  MINFER_CHECK(n_seqs_ >= 1 && n_seqs_ <= 4096, "batch of ", n_seqs_, " sequences: must be in [1, 4096]");
  MINFER_CHECK(n_ctx <= info.n_ctx, "context ", n_ctx, " exceeds the model's ",
               info.n_ctx, " positions");
  MINFER_CHECK(options.pass_rows >= 1, "pass_rows must be positive");
  MINFER_CHECK(options.logits_per_seq >= 1 && options.logits_per_seq <= 64, "logits_per_seq ",
               options.logits_per_seq, ": must be in [1, 64]");
  logits_per_seq_ = options.logits_per_seq;
  const int64_t seq_logit_rows = n_seqs_ * options.logits_per_seq;  // at most 4096 x 64
  pass_rows_ = std::max(options.pass_rows, seq_logit_rows);
  MINFER_CHECK(options.extra_logit_rows >= 0 && options.extra_logit_rows <= 4096, "extra_logit_rows ",
               options.extra_logit_rows, ": must be in [0, 4096]");
  // (A pass has no more logits rows than rows.)
  logit_rows_ = options.logits_every_row ? pass_rows_ : std::min(pass_rows_, seq_logit_rows + options.extra_logit_rows);
  const DType kv_dtype = options.kv_dtype ? *options.kv_dtype : default_kv_dtype(backend_.device(), info.dtype);
  MINFER_CHECK(kv_dtype == DType::f32 || kv_dtype == DType::f16 || kv_dtype == DType::bf16,
               "the KV cache is f32, f16 or bf16, not ", dtype_name(kv_dtype));
  MINFER_CHECK(kv_dtype != DType::bf16 || backend_.kind() != BackendKind::cpu,
               "a bf16 KV cache runs on CUDA and ref, not cpu, which keeps f32 or f16 (--kv-dtype)");
  // Everything this decoder will allocate, checked against the device's memory first.
  const char* what = "decoder memory";
  MINFER_CHECK(options.kv_blocks >= 0 && options.kv_block_size >= 1, "kv_blocks ", options.kv_blocks,
               " must be >= 0 and kv_block_size ", options.kv_block_size, " >= 1");
  const int64_t kv_dim = info.n_kv_heads * info.head_dim;
  const uint64_t cache_bytes = KvCache::bytes_needed(info.n_layers, n_seqs_, n_ctx, kv_dim, kv_dtype,
                                                     options.kv_block_size, options.kv_blocks);
  const uint64_t activation_bytes = model_.activation_bytes(pass_rows_, logit_rows_);
  const uint64_t logit_bytes = checked_product({2, uint64_t(logit_rows_), uint64_t(vocab_), 4}, what);
  const uint64_t needed = checked_add(checked_add(cache_bytes, activation_bytes, what), logit_bytes, what);
  check_memory_fits(backend_, needed,
                    std::to_string(n_seqs_) + " sequences of " + std::to_string(n_ctx) + " positions (KV cache " +
                        std::to_string(cache_bytes) + " bytes, activations " + std::to_string(activation_bytes) +
                        ", logits " + std::to_string(logit_bytes) + ")");
  cache_ = KvCache(backend_, info.n_layers, n_seqs_, n_ctx, info.n_kv_heads, info.head_dim, kv_dtype,
                   options.kv_block_size, options.kv_blocks);
  model_.reserve(pass_rows_, logit_rows_);
  n_past_.assign(static_cast<size_t>(n_seqs_), 0);
  const int64_t staging = 3 * pass_rows_ + logit_rows_;
  staging_ = backend_.empty_host({staging}, DType::i32);
  batch_ = backend_.empty({staging}, DType::i32);
  logits_ = backend_.empty({logit_rows_, vocab_}, DType::f32);
  host_logits_ = backend_.device() == DeviceKind::cpu ? logits_ : backend_.empty_host({logit_rows_, vocab_}, DType::f32);
  argmax_ = backend_.empty({logit_rows_}, DType::i32);
  host_argmax_ = backend_.empty_host({logit_rows_}, DType::i32);
  next_.resize(static_cast<size_t>(n_seqs_));
  static std::atomic<uint64_t> decoders{0};
  recording_prefix_ = "decoder " + std::to_string(decoders++) + "/";
}

Decoder::~Decoder() {
  // note: after a device error synchronize() throws again here, and a throwing destructor is
  // std::terminate (one faulting test would end the whole run, a server would abort): report it
  // and go on.
  try {
    backend_.synchronize();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minfer: warning: a decoder was destroyed after a device error: %s\n", e.what());
  }
  backend_.forget_recordings(recording_prefix_);
}

void Decoder::reset() {
  std::fill(n_past_.begin(), n_past_.end(), 0);
  host_logits_valid_ = false;
}

bool Decoder::is_stop(int32_t token) const {
  return is_stop_token(model_.info().stop_ids, token);
}

void Decoder::check_token(int32_t token) const {
  MINFER_CHECK(token >= 0 && token < vocab_, "token id ", token, " is outside the vocabulary [0, ",
               vocab_, ")");
}

// note: the staging buffer holds a batch packed end to end, tokens (n_rows), sequences (n_rows),
// positions (n_rows), logit rows: one copy moves everything a forward pass needs to the device.
// Runs such a packed batch; its logit rows go to rows first_logit_row, +1, ... of the logits.
// First the host's part, at every step: the rows are checked against the host's block table
// (before any op: CUDA's kernels cannot check) and a table that changed is copied. Then the
// device work, which may be recorded and replayed; the host fills the staging buffer before, and
// must not touch it again until the device has copied it: every writer of the staging buffer
// first waits for the device (synchronize()), so a copy still in flight is never overwritten.
void Decoder::run_rows(int64_t n_rows, int64_t first_logit_row, int64_t n_logit_rows,
                       const std::string* recording_key) {
  const int32_t* staged = staging_.data_as<int32_t>();
  cache_.check_rows("forward pass", staged + n_rows, staged + 2 * n_rows, n_rows);
  if (leads_ != nullptr) broadcast_pass(n_rows, first_logit_row, n_logit_rows, recording_key != nullptr);
  cache_.upload(backend_);
  auto device_work = [&] {
    backend_.copy_async(batch_.slice(0, 0, 3 * n_rows + n_logit_rows), staging_.slice(0, 0, 3 * n_rows + n_logit_rows));
    ForwardBatch batch;
    batch.tokens = batch_.slice(0, 0, n_rows);
    batch.seq = batch_.slice(0, n_rows, 2 * n_rows);
    batch.pos = batch_.slice(0, 2 * n_rows, 3 * n_rows);
    batch.logit_rows = batch_.slice(0, 3 * n_rows, 3 * n_rows + n_logit_rows);
    model_.forward(batch, cache_, logits_.slice(0, first_logit_row, first_logit_row + n_logit_rows));
  };
  if (recording_key != nullptr)
    backend_.run_recorded(*recording_key, device_work);
  else
    device_work();
}

void Decoder::prefill(const std::vector<std::vector<int32_t>>& prompts) {
  TraceRange trace("prefill");
  MINFER_CHECK(static_cast<int64_t>(prompts.size()) == n_seqs_, "prefill: ", prompts.size(),
               " prompts for ", n_seqs_, " sequences");
  for (int64_t s = 0; s < n_seqs_; ++s) {
    MINFER_CHECK(!prompts[s].empty(), "prefill: the prompt of sequence ", s, " is empty");
    MINFER_CHECK(n_past_[s] + int64_t(prompts[s].size()) <= room(s), "prompt of ",
                 prompts[s].size(), " tokens after ", n_past_[s], " positions: ",
                 n_past_[s] + int64_t(prompts[s].size()), " tokens > context ", room(s));
    for (int32_t t : prompts[s]) check_token(t);
  }
  backend_.synchronize();  // the staging buffer is free once the device is idle
  int32_t* host = staging_.data_as<int32_t>();
  const StagedRows staged{host, pass_rows_};
  int64_t rows = 0, logit_rows = 0, first_logit_row = 0;
  // Prefill stages rows in four arrays of pass_rows_ slots (the chunk's length is known only at
  // its end), then packs them left, to a stride of `rows`, before running the chunk.
  auto flush = [&] {
    if (rows > 0) {
      std::copy(host + pass_rows_, host + pass_rows_ + rows, host + rows);
      std::copy(host + 2 * pass_rows_, host + 2 * pass_rows_ + rows, host + 2 * rows);
      std::copy(host + 3 * pass_rows_, host + 3 * pass_rows_ + logit_rows, host + 3 * rows);
      run_rows(rows, first_logit_row, logit_rows);
      backend_.synchronize();  // before the next chunk is staged
    }
    first_logit_row += logit_rows;
    rows = logit_rows = 0;
  };
  // Rows go sequence by sequence in position order, pass_rows_ at a time.
  for (int64_t s = 0; s < n_seqs_; ++s) {
    const int64_t length = static_cast<int64_t>(prompts[s].size());
    for (int64_t p = 0; p < length; ++p) {
      if (rows == pass_rows_) flush();
      staged.put(rows, prompts[s][p], s, n_past_[s] + p);
      if (p == length - 1) staged.logit_row(logit_rows++, rows);
      ++rows;
    }
    n_past_[s] += length;
  }
  flush();
  host_logits_valid_ = false;
  rows_are_sequences_ = true;
}

void Decoder::prefill_scored(int64_t seq, const std::vector<int32_t>& tokens,
                             const std::function<void(int64_t, const float*)>& on_logits) {
  TraceRange trace("prefill (every row scored)");
  MINFER_CHECK(logit_rows_ == pass_rows_, "prefill_scored: the decoder was made without logits_every_row");
  MINFER_CHECK(seq >= 0 && seq < n_seqs_, "prefill_scored: no sequence ", seq);
  const int64_t length = static_cast<int64_t>(tokens.size());
  MINFER_CHECK(n_past_[seq] + length <= room(seq), tokens.size(), " tokens after ", n_past_[seq],
               " positions: ", n_past_[seq] + length, " tokens > context ", room(seq));
  for (int32_t t : tokens) check_token(t);
  for (int64_t begin = 0; begin < length; begin += pass_rows_) {
    const int64_t rows = std::min(pass_rows_, length - begin);
    backend_.synchronize();  // the staging buffer is free once the device is idle
    const StagedRows staged{staging_.data_as<int32_t>(), rows};
    for (int64_t r = 0; r < rows; ++r) {
      staged.put(r, tokens[begin + r], seq, n_past_[seq] + begin + r);
      staged.logit_row(r, r);
    }
    run_rows(rows, 0, rows);
    if (host_logits_.data() != logits_.data())
      backend_.copy_async(host_logits_.slice(0, 0, rows), logits_.slice(0, 0, rows));
    backend_.synchronize();
    for (int64_t r = 0; r < rows; ++r) on_logits(begin + r, host_logits_.data_as<float>() + r * vocab_);
  }
  n_past_[seq] += length;
  host_logits_valid_ = false;
  rows_are_sequences_ = false;  // logits_ rows no longer hold each sequence's next-token logits
}

void Decoder::forward_chunks(const std::vector<Chunk>& chunks) {
  TraceRange trace("mixed step");
  int64_t rows = 0, logit_rows = 0;
  for (const Chunk& c : chunks) {
    MINFER_CHECK(c.seq >= 0 && c.seq < n_seqs_, "forward_chunks: no sequence ", c.seq);
    MINFER_CHECK(c.n >= 1, "forward_chunks: an empty chunk for sequence ", c.seq);
    MINFER_CHECK(n_past_[c.seq] + c.n <= room(c.seq), "forward_chunks: sequence ", c.seq, " would reach ",
                 n_past_[c.seq] + c.n, " positions > context ", room(c.seq));
    for (int64_t i = 0; i < c.n; ++i) check_token(c.tokens[i]);
    rows += c.n;
    logit_rows += c.every_row ? c.n : c.logits ? 1 : 0;
  }
  if (rows == 0) return;
  MINFER_CHECK(rows <= pass_rows_, "forward_chunks: ", rows, " rows > ", pass_rows_, " per pass");
  MINFER_CHECK(logit_rows <= logit_rows_, "forward_chunks: ", logit_rows, " logits rows > ", logit_rows_);
  backend_.synchronize();  // the staging buffer is free once the device is idle
  const StagedRows staged{staging_.data_as<int32_t>(), rows};
  int64_t r = 0, l = 0;
  for (const Chunk& c : chunks) {
    for (int64_t i = 0; i < c.n; ++i, ++r) staged.put(r, c.tokens[i], c.seq, n_past_[c.seq] + i);
    if (c.every_row)
      for (int64_t i = c.n; i > 0; --i) staged.logit_row(l++, r - i);
    else if (c.logits)
      staged.logit_row(l++, r - 1);
  }
  run_rows(rows, 0, logit_rows);
  for (const Chunk& c : chunks) n_past_[c.seq] += c.n;
  host_logits_valid_ = false;
  rows_are_sequences_ = false;
}

float* Decoder::logits_row(int64_t row) {
  MINFER_CHECK(row >= 0 && row < logit_rows_, "logits_row: no row ", row);
  fetch_logits();
  return host_logits_.data_as<float>() + row * vocab_;
}

void Decoder::argmax_rows(int64_t n, std::vector<int32_t>* out) {
  MINFER_CHECK(n >= 0 && n <= logit_rows_, "argmax_rows: ", n, " rows of ", logit_rows_);
  if (n == 0) {
    out->clear();
    return;
  }
  backend_.argmax(argmax_.slice(0, 0, n), logits_.slice(0, 0, n));
  backend_.copy_async(host_argmax_.slice(0, 0, n), argmax_.slice(0, 0, n));
  backend_.synchronize();
  out->assign(host_argmax_.data_as<int32_t>(), host_argmax_.data_as<int32_t>() + n);
}

int64_t Decoder::room(int64_t seq) const {
  return std::min(cache_.n_ctx(), cache_.blocks_held(seq) * cache_.block_size());
}

void Decoder::set_blocks(int64_t seq, const int32_t* blocks, int64_t n, int64_t n_past) {
  backend_.synchronize();  // the last upload of the table has happened
  MINFER_CHECK(n_past >= 0 && n_past <= n * cache_.block_size(), "set_blocks: ", n_past, " positions in ", n,
               " blocks of ", cache_.block_size());
  cache_.set_row(seq, blocks, n);
  n_past_[size_t(seq)] = n_past;
}

void Decoder::copy_block(int32_t dst, int32_t src) {
  backend_.synchronize();  // no pass is reading or writing the cache
  cache_.copy_block(backend_, dst, src);
  if (leads_ != nullptr) broadcast_copy(dst, src);
}

void Decoder::reset_sequence(int64_t seq) {
  MINFER_CHECK(seq >= 0 && seq < n_seqs_, "reset_sequence: no sequence ", seq);
  n_past_[seq] = 0;
}

void Decoder::rewind(int64_t seq, int64_t n_past) {
  MINFER_CHECK(seq >= 0 && seq < n_seqs_, "rewind: no sequence ", seq);
  MINFER_CHECK(n_past >= 0 && n_past <= n_past_[seq], "rewind: sequence ", seq, " is at ", n_past_[seq],
               " positions, not back to ", n_past);
  n_past_[seq] = n_past;
}

void Decoder::decode(const std::vector<int32_t>& tokens) {
  TraceRange trace("decode step");
  MINFER_CHECK(static_cast<int64_t>(tokens.size()) == n_seqs_, "decode: ", tokens.size(),
               " tokens for ", n_seqs_, " sequences");
  backend_.synchronize();  // the previous step's copy of the staging buffer has happened
  const StagedRows staged{staging_.data_as<int32_t>(), n_seqs_};
  for (int64_t s = 0; s < n_seqs_; ++s) {  // packed directly: n_seqs rows, logits for every one
    check_token(tokens[s]);
    MINFER_CHECK(n_past_[s] < room(s), "decode: sequence ", s, " is full (", room(s), " positions)");
    staged.put(s, tokens[s], s, n_past_[s]);
    staged.logit_row(s, s);
  }
  run_rows(n_seqs_, 0, n_seqs_, &decode_key());
  for (int64_t& n_past : n_past_) ++n_past;
  host_logits_valid_ = false;
  rows_are_sequences_ = true;
}

const std::string& Decoder::decode_key() {
  if (decode_key_epoch_ != model_.graph_epoch()) {  // not per step: no allocation in the loop
    decode_key_epoch_ = model_.graph_epoch();
    decode_key_ = recording_prefix_ + "decode@" + std::to_string(decode_key_epoch_);
  }
  return decode_key_;
}

void Decoder::fetch_logits() {
  if (host_logits_valid_) return;
  if (host_logits_.data() != logits_.data()) backend_.copy_async(host_logits_, logits_);
  backend_.synchronize();
  host_logits_valid_ = true;
}

float* Decoder::logits(int64_t seq) {
  MINFER_CHECK(seq >= 0 && seq < n_seqs_, "logits: no sequence ", seq);
  MINFER_CHECK(rows_are_sequences_, "logits: the last pass was forward_chunks, whose rows are chunks (logits_row)");
  fetch_logits();
  return host_logits_.data_as<float>() + seq * vocab_;
}

void Decoder::argmax(std::vector<int32_t>* out) { argmax_rows(n_seqs_, out); }

GenerateResult Decoder::generate(const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerateOptions& options,
                                 const std::function<void(int64_t, int32_t)>& on_token) {
  MINFER_CHECK(static_cast<int64_t>(prompts.size()) == n_seqs_, "generate: ", prompts.size(),
               " prompts for ", n_seqs_, " sequences");
  MINFER_CHECK(options.n_new >= 1, "generate: at least one new token, got ", options.n_new);
  for (const auto& p : prompts) {
    MINFER_CHECK(!p.empty(), "generate: a prompt needs at least one token (BOS)");
    check_fits_context(static_cast<int64_t>(p.size()), options.n_new, cache_.n_ctx());
  }
  samplers_.clear();
  for (int64_t s = 0; s < n_seqs_; ++s) {
    samplers_.emplace_back(vocab_, options.temperature, options.top_p, options.seed + uint64_t(s));
    samplers_.back().restart(options.temperature, options.top_p, options.seed + uint64_t(s), options.sampling);
    samplers_.back().begin(prompts[s].data(), static_cast<int64_t>(prompts[s].size()));
  }
  // The device's arg-max is the greedy token unless the sampler changes the logits first.
  const bool greedy = options.temperature == 0.0f && !options.sampling.processes_logits();

  GenerateResult result;
  result.tokens.assign(static_cast<size_t>(n_seqs_), {});
  for (auto& t : result.tokens) t.reserve(static_cast<size_t>(options.n_new));
  std::vector<bool> done(static_cast<size_t>(n_seqs_), false);
  reset();

  double t0 = now_seconds();
  if (options.prefill_one_by_one) {
    // run.c's way: one forward pass per prompt token. Kept to show what batched prefill saves,
    // and to test that both give the same tokens.
    const size_t length = prompts[0].size();
    MINFER_CHECK(std::all_of(prompts.begin(), prompts.end(), [&](const auto& p) { return p.size() == length; }),
                 "one-by-one prefill needs prompts of equal length");
    std::vector<std::vector<int32_t>> first(static_cast<size_t>(n_seqs_));
    for (int64_t s = 0; s < n_seqs_; ++s) first[s] = {prompts[s][0]};
    prefill(first);
    for (size_t i = 1; i < length; ++i) {
      for (int64_t s = 0; s < n_seqs_; ++s) next_[s] = prompts[s][i];
      decode(next_);
    }
  } else {
    prefill(prompts);
  }
  if (greedy) {
    argmax(&next_);
  } else {
    for (int64_t s = 0; s < n_seqs_; ++s) next_[s] = samplers_[s].sample(logits(s));
  }
  result.prefill_seconds = now_seconds() - t0;
  for (const auto& p : prompts) result.prompt_tokens += static_cast<int64_t>(p.size());

  double decode_time = 0.0;
  for (int64_t step = 0;; ++step) {
    int64_t active = 0;
    for (int64_t s = 0; s < n_seqs_; ++s) {
      if (done[s]) continue;
      if (options.stop_at_eos && is_stop(next_[s])) {
        done[s] = true;
        continue;
      }
      result.tokens[s].push_back(next_[s]);
      if (on_token) on_token(s, next_[s]);
      ++active;
    }
    if (active == 0 || step + 1 >= options.n_new) break;
    // Timed: the forward pass and bringing its result to the host; not the host-side sampling.
    double t1 = now_seconds();
    decode(next_);  // finished sequences keep a row, their outputs are ignored
    if (greedy) argmax(&next_); else fetch_logits();
    decode_time += now_seconds() - t1;
    if (!greedy) {
      for (int64_t s = 0; s < n_seqs_; ++s)
        if (!done[s]) next_[s] = samplers_[s].sample(logits(s));
    }
    ++result.decode_steps;
    result.decode_tokens += active;
  }
  result.decode_seconds = decode_time;
  return result;
}

}  // namespace minfer
