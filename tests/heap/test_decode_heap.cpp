// A decode step allocates nothing: not from the backend's memory pool (tests/test_decoder.cpp
// checks that) and not from the C++ heap either. This binary replaces the global operator new with
// one that counts calls while `counting` is set, runs the decode loop and the scheduler's steps
// once to warm up (buffers that grow once, then are reused, grow there), then counts a stretch of
// steps. Its own executable, because it replaces operator new for the whole program (and is not
// built under AddressSanitizer, which replaces it too).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "engine/backend.h"
#include "engine/decoder.h"
#include "engine/scheduler.h"
#include "formats/model_files.h"
#include "model/llama.h"

namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace minfer {
namespace {

// Heap allocations made by fn() on any thread.
template <class Fn>
long allocations_in(Fn&& fn) {
  allocations = 0;
  counting = true;
  fn();
  counting = false;
  return allocations.load();
}

// Heap allocations in 20 decode steps of four sequences, after their prompts and two steps to warm
// up (buffers that grow once, then are reused, grow there).
long decode_step_allocations(LlamaModel& model) {
  DecoderOptions options;
  options.n_seqs = 4;
  options.n_ctx = 64;
  Decoder decoder(model, options);
  decoder.prefill({{1, 2, 3}, {1, 4}, {1}, {1, 5, 6, 7}});
  std::vector<int32_t> next;
  next.reserve(4);
  for (int step = 0; step < 2; ++step) {
    decoder.argmax(&next);
    decoder.decode(next);
  }
  return allocations_in([&] {
    for (int step = 0; step < 20; ++step) {
      decoder.argmax(&next);
      decoder.decode(next);
      decoder.fetch_logits();
    }
  });
}

// Four sequences decoding, with f32, Q4_K and Q4_0 weights (the quantized products' buffers), fused
// and unfused kernels. preset:tiny's rows are too short for Q4_K's blocks, so most of its matrices
// fall back to Q5_0; with AVX2 or AVX-512 the CPU packs Q4_0 and Q5_0 at load, the
// tied embedding table too, so decode reads packed weights and looks tokens up from packed rows.
TEST(DecodeHeap, DecodeStepsAllocateNothing) {
  auto backend = make_backend(BackendKind::cpu);
  for (const char* dtype : {"f32", "q4_k", "q4_0"})
    for (Kernels kernels : {Kernels::fused, Kernels::unfused}) {
      SCOPED_TRACE(std::string(dtype) + (kernels == Kernels::fused ? " fused" : " unfused"));
      LlamaOptions o;
      o.dtype = WeightTypes::parse(dtype);
      o.kernels = kernels;
      auto model = load_model("preset:tiny", *backend, o);
      EXPECT_EQ(decode_step_allocations(*model), 0) << "heap allocations in 20 decode steps of 4 sequences";
    }
}

// A mixture of experts (synthetic weights, top 2 of 8 experts, Qwen2-MoE's shared expert): its
// routing and its grouped expert products, whose groups change size from step to step, in f32 and
// in Q4_0 (packed experts).
TEST(DecodeHeap, ExpertDecodeStepsAllocateNothing) {
  auto backend = make_backend(BackendKind::cpu);
  LlamaConfig c;
  c.dim = 64;
  c.hidden_dim = 96;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 97;
  c.n_ctx = 64;
  c.n_experts = 8;
  c.n_experts_used = 2;
  c.expert_hidden_dim = 64;
  c.shared_expert_hidden_dim = 32;
  for (DType dtype : {DType::f32, DType::q4_0}) {
    SCOPED_TRACE(dtype_name(dtype));
    LlamaOptions o;
    o.dtype = WeightTypes(dtype);
    LlamaModel model(*backend, c, "experts", o);
    EXPECT_EQ(decode_step_allocations(model), 0) << "heap allocations in 20 decode steps of 4 sequences";
  }
}

// Scheduler::step allocates nothing either: while three requests decode (their prompts read) and
// take a block of 8 positions every 8 tokens, while a fourth and a fifth with one prompt are
// admitted (the fifth waits for the fourth's blocks, then holds them), and on to the end of every
// request; then a sixth with that prompt again copies the last, partly filled block. The callbacks
// write into space reserved before; submit() allocates, on the caller's thread, and is outside the
// counts.
TEST(DecodeHeap, SchedulerDecodeStepsAllocateNothing) {
  auto backend = make_backend(BackendKind::cpu);
  auto model = load_model("preset:tiny", *backend, {});
  SchedulerOptions o;
  o.slots = 5;
  o.pass_rows = 16;
  o.kv_block_size = 8;
  Scheduler scheduler(*model, o);
  std::vector<int32_t> tokens;
  tokens.reserve(3 * 64);
  for (int i = 0; i < 3; ++i) {
    ServeRequest r;
    r.prompt = {1, int32_t(2 + i), int32_t(7 + i)};
    r.max_tokens = 40;
    r.temperature = i == 0 ? 0.0f : 0.8f;  // greedy and sampled
    r.top_p = 0.9f;
    r.seed = 1 + uint64_t(i);
    r.stop_at_eos = false;
    r.on_token = [&tokens](int32_t t) {
      tokens.push_back(t);
      return true;
    };
    scheduler.submit(std::move(r));
  }
  for (int step = 0; step < 4; ++step) ASSERT_TRUE(scheduler.step());
  const long n = allocations_in([&] {
    for (int step = 0; step < 20; ++step) scheduler.step();
  });
  EXPECT_EQ(n, 0) << "heap allocations in 20 scheduler steps of 3 decoding requests";
  auto late = [] {
    ServeRequest r;
    r.prompt = std::vector<int32_t>(30, 5);
    r.max_tokens = 4;
    r.stop_at_eos = false;
    r.on_token = [](int32_t) { return true; };
    return r;
  };
  scheduler.submit(late());
  scheduler.submit(late());
  const long admit = allocations_in([&] {
    for (int step = 0; step < 3; ++step) scheduler.step();
  });
  EXPECT_EQ(admit, 0) << "heap allocations in the steps that admit a request and read its prompt";
  const long rest = allocations_in([&] {
    while (scheduler.step()) {
    }
  });
  EXPECT_EQ(rest, 0) << "heap allocations in the steps that finish every request";
  EXPECT_GE(tokens.size(), size_t(3 * 20));
  EXPECT_EQ(scheduler.metrics().prompt_tokens_cached, uint64_t(24)) << "the fifth request held 3 blocks";
  scheduler.submit(late());
  const long copied = allocations_in([&] {
    while (scheduler.step()) {
    }
  });
  EXPECT_EQ(copied, 0) << "heap allocations in the steps of a request that copies a cached block";
  EXPECT_EQ(scheduler.metrics().prompt_tokens_cached, uint64_t(24 + 29)) << "the sixth found all but its last token";
}

// The sampler's cuts, penalties and bias, and logprobs, allocate nothing in a step either, nor
// does the admission of a request with them: a slot's counts and bias list are sized when the
// scheduler is made.
TEST(DecodeHeap, SamplingOptionsAndLogprobsAllocateNothingPerStep) {
  auto backend = make_backend(BackendKind::cpu);
  auto model = load_model("preset:tiny", *backend, {});
  SchedulerOptions o;
  o.slots = 1;
  Scheduler scheduler(*model, o);
  std::vector<TokenLogprob> logprobs;
  logprobs.reserve(2 * 30 * 21);
  auto request = [&logprobs](bool with_options) {
    ServeRequest r;
    r.prompt = {1, 2, 3};
    r.max_tokens = 30;
    r.temperature = 0.8f;
    r.stop_at_eos = false;
    r.on_token = [](int32_t) { return true; };
    if (!with_options) return r;
    r.sampling.top_k = 40;
    r.sampling.min_p = 0.05f;
    r.sampling.presence_penalty = 0.5f;
    r.sampling.frequency_penalty = 0.5f;
    r.sampling.repetition_penalty = 1.3f;
    r.sampling.logit_bias = {{5, 2.0f}, {9, -2.0f}};
    r.top_logprobs = 20;
    r.on_logprobs = [&logprobs](const SampledLogprobs& s) {
      logprobs.push_back(s.sampled);
      logprobs.insert(logprobs.end(), s.top, s.top + s.n_top);
    };
    return r;
  };
  scheduler.submit(request(false));  // warms up the steps without any option
  while (scheduler.step()) {
  }
  scheduler.submit(request(true));
  const long n = allocations_in([&] {
    while (scheduler.step()) {
    }
  });
  EXPECT_EQ(n, 0) << "heap allocations in the steps of a request with every sampling option and logprobs, "
                     "its admission included";
  scheduler.submit(request(true));
  const long again = allocations_in([&] {
    while (scheduler.step()) {
    }
  });
  EXPECT_EQ(again, 0) << "heap allocations in the steps of a second such request, its admission included";
  EXPECT_EQ(logprobs.size(), size_t(2 * 30 * 21));
}

// A request for its prompt's logprobs (echo) allocates nothing in its steps, its admission and its
// prompt of more rows than a pass has logits rows for (kPromptLogitsRows) included.
TEST(DecodeHeap, PromptLogprobsAllocateNothingPerStep) {
  auto backend = make_backend(BackendKind::cpu);
  auto model = load_model("preset:tiny", *backend, {});
  SchedulerOptions o;
  o.slots = 2;
  Scheduler scheduler(*model, o);
  const auto n_prompt = size_t(2 * kPromptLogitsRows + 5);
  std::vector<TokenLogprob> logprobs;
  logprobs.reserve(n_prompt * 6);
  ServeRequest r;
  r.prompt = std::vector<int32_t>(n_prompt, 7);
  r.max_tokens = 3;
  r.stop_at_eos = false;
  r.top_logprobs = 5;
  r.prompt_logprobs = true;
  r.on_token = [](int32_t) { return true; };
  r.on_prompt_logprobs = [&logprobs](int64_t, const SampledLogprobs& s) {
    logprobs.push_back(s.sampled);
    logprobs.insert(logprobs.end(), s.top, s.top + s.n_top);
  };
  ServeRequest plain = r;
  plain.prompt_logprobs = false;
  scheduler.submit(plain);  // warms up the steps without prompt logprobs
  while (scheduler.step()) {
  }
  scheduler.submit(r);
  const long n = allocations_in([&] {
    while (scheduler.step()) {
    }
  });
  EXPECT_EQ(n, 0) << "heap allocations in the steps of a request for its prompt's logprobs";
  EXPECT_EQ(logprobs.size(), (n_prompt - 1) * 6);
}

}  // namespace
}  // namespace minfer
