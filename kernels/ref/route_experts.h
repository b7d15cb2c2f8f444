#pragma once

#include <cstdint>

namespace minfer::ref {

// The most experts a router chooses among (the backends' checks refuse more): enough for every
// family minfer runs (Qwen3-MoE's 128, DeepSeek's 256), and a CPU row's ranking fits on the stack.
constexpr int64_t kMaxExperts = 1024;

// A mixture of experts' router, row by row (Qwen3-MoE, OLMoE, Mixtral, Qwen2-MoE):
//   p = softmax(logits[m, :])
//   ids[m, :] = the k experts of largest p, best first; of equal logits the lower expert first
//   weights[m, j] = p[ids[m, j]], divided by the sum of the k where `normalize`
// note: Mixtral takes the top k of the logits and a softmax over those k; that is the same numbers
// as a softmax over all E renormalised over the k (the other experts' terms cancel), so one op
// serves every family.
void route_experts(int32_t* ids, float* weights,             // (M, k) each, dense
                   const float* logits, int64_t ld_logits,   // (M, E)
                   int64_t M, int64_t E, int64_t k, bool normalize);

}  // namespace minfer::ref
