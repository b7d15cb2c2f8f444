#include "kernels/cpu/attention.h"

#include <Eigen/Core>
#include <algorithm>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/simd.h"
#include "kernels/ref/kv_store.h"
#include "kernels/ref/online_softmax.h"

namespace minfer::cpu {

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Rows = Eigen::Map<const RowMajor, 0, Eigen::OuterStride<>>;
using Vector = Eigen::Map<Eigen::VectorXf>;
using ConstVector = Eigen::Map<const Eigen::VectorXf>;

// Keys per block of the online variant: 64 scores live in registers and L1.
constexpr int64_t kKeyBlock = 64;
// Query heads that share a KV head, at most, for one task of the online variant to take together.
constexpr int64_t kMaxGroup = 16;

// The scores and weighted sum (below) as function pointers, for a cache of type W (simd::F32 or
// simd::F16): the arguments of scores() and weighted_sum().
template <class W>
using ScoresFn = void (*)(float*, const float*, const typename W::Stored*, int64_t, int64_t, float,
                          const typename W::Stored*, int64_t);
template <class W>
using WeightedSumFn = void (*)(float*, const float*, const typename W::Stored*, int64_t, int64_t, bool,
                               const typename W::Stored*, int64_t);
template <class W>
using KernelPair = std::pair<ScoresFn<W>, WeightedSumFn<W>>;

// Plain loops for any head_dim: the f16 cache's fallback where there are no vectorised kernels for
// its head size (not whole vectors, above 128, or a build without AVX2); an f32 cache falls back
// to Eigen instead.
template <class W>
void scores_scalar(float* score, const float* q, const typename W::Stored* keys, int64_t stride, int64_t n,
                   float scale, const typename W::Stored*, int64_t) {
  for (int64_t t = 0; t < n; ++t) {
    float dot = 0.0f;
    for (int64_t i = 0; i < stride; ++i) dot += q[i] * W::scalar(keys + t * stride + i);
    score[t] = dot * scale;
  }
}
template <class W>
void weighted_sum_scalar(float* out, const float* p, const typename W::Stored* values, int64_t stride, int64_t n,
                         bool accumulate, const typename W::Stored*, int64_t) {
  if (!accumulate) std::fill(out, out + stride, 0.0f);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < stride; ++i) out[i] += p[t] * W::scalar(values + t * stride + i);
}

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
// note: with AVX-512 or AVX2 and head_dim a multiple of the vector width L (16 or 8 floats) the
// two inner loops are hand-vectorised: q sits in HV vectors, each key costs HV FMAs into its own
// accumulator, and L keys' accumulators are reduced to L scores by one shared transpose-and-add
// (simd::sum_each) instead of L horizontal sums. Eigen's general matrix-vector product spends
// most of its time on setup at these tiny sizes (bench/results/NOTES.md, "CPU attention").
constexpr int L = simd::kWidth;

// Requests rows [t0, t0 + 16) of `rows` (up to n_rows; rows of L * HV values) into L2.
// The kernels below request, 16 rows per 16 keys, the rows for_each_run names: the next block of
// this head's keys, or the next task's first block (why: the note there).
// note: into L2 (prefetcht1), not L1 (prefetcht0): a prefetch into L1 holds one of L1's few miss
// buffers until the line comes, so fewer lines are on their way from DRAM at once (our reading of
// the measurements in bench/results/NOTES.md, "Decode attention: prefetching into L2, a KV head at
// a time").
template <class W, int HV>
inline void prefetch_rows(const typename W::Stored* rows, int64_t n_rows, int64_t t0) {
  if (rows == nullptr) return;
  constexpr int64_t line = 64 / sizeof(typename W::Stored);  // elements per 64-byte cache line
  const int64_t end = std::min(n_rows, t0 + 16) * L * HV;
  for (int64_t i = t0 * L * HV; i < end; i += line) __builtin_prefetch(rows + i, 0, 2);
}

// score[t] = scale * q . keys[t] for t < n (keys at row stride `stride`, which is L * HV); the
// rows of next_keys (n_next of them) are prefetched on the way, 16 rows per 16 keys.
template <class W, int HV>
void scores(float* score, const float* q, const typename W::Stored* keys, int64_t stride, int64_t n, float scale,
            const typename W::Stored* next_keys, int64_t n_next) {
  simd::Vec qv[HV];
  for (int j = 0; j < HV; ++j) qv[j] = simd::load(q + L * j);
  const simd::Vec scale_v = simd::set1(scale);
  for (int64_t t0 = 0; t0 < n; t0 += L) {
    if (t0 % 16 == 0) prefetch_rows<W, HV>(next_keys, n_next, t0);
    const int64_t count = std::min<int64_t>(L, n - t0);
    simd::Vec acc[L];
    for (int i = 0; i < L; ++i) acc[i] = simd::zero();
    // j outside, keys inside: the L accumulators are L independent FMA chains.
    if (count == L) {
      for (int j = 0; j < HV; ++j)
        for (int i = 0; i < L; ++i) acc[i] = simd::fma(qv[j], W::load(keys + (t0 + i) * stride + L * j), acc[i]);
    } else {
      for (int j = 0; j < HV; ++j)
        for (int64_t i = 0; i < count; ++i) acc[i] = simd::fma(qv[j], W::load(keys + (t0 + i) * stride + L * j), acc[i]);
    }
    simd::Vec sums = simd::mul(simd::sum_each(acc), scale_v);
    if (count == L) {
      simd::store(score + t0, sums);
    } else {
      alignas(64) float tail[L];
      simd::store(tail, sums);
      std::copy(tail, tail + count, score + t0);
    }
  }
  for (int64_t t0 = (n + 15) / 16 * 16; t0 < n_next; t0 += 16) prefetch_rows<W, HV>(next_keys, n_next, t0);
}

// out (+)= sum_t p[t] * values[t] for t < n; `accumulate` adds to out instead of overwriting. The
// rows of next_values (n_next of them) are prefetched on the way.
template <class W, int HV>
void weighted_sum(float* out, const float* p, const typename W::Stored* values, int64_t stride, int64_t n,
                  bool accumulate, const typename W::Stored* next_values, int64_t n_next) {
  // Sets of accumulators: keys t, t+1, ... feed independent FMA chains. AVX2 has 16 vector
  // registers, so there the sets shrink as the head grows, to one set of HV from head_dim 56 on
  // (which spills at 128: 16 accumulators, unmeasured).
  constexpr int U = L == 16 ? 4 : std::clamp(12 / HV, 1, 4);
  simd::Vec o[U][HV];
  for (int u = 0; u < U; ++u)
    for (int j = 0; j < HV; ++j) o[u][j] = u == 0 && accumulate ? simd::load(out + L * j) : simd::zero();
  int64_t t = 0, prefetched = 0;  // rows of next_values requested so far, 16 at a time
  for (; t + U <= n; t += U) {
    if (t >= prefetched) {
      prefetch_rows<W, HV>(next_values, n_next, prefetched);
      prefetched += 16;
    }
    for (int u = 0; u < U; ++u) {
      const simd::Vec pt = simd::set1(p[t + u]);
      for (int j = 0; j < HV; ++j) o[u][j] = simd::fma(pt, W::load(values + (t + u) * stride + L * j), o[u][j]);
    }
  }
  for (int64_t t0 = prefetched; t0 < n_next; t0 += 16) prefetch_rows<W, HV>(next_values, n_next, t0);
  for (; t < n; ++t) {
    const simd::Vec pt = simd::set1(p[t]);
    for (int j = 0; j < HV; ++j) o[0][j] = simd::fma(pt, W::load(values + t * stride + L * j), o[0][j]);
  }
  for (int j = 0; j < HV; ++j) {
    simd::Vec total = o[0][j];
    for (int u = 1; u < U; ++u) total = simd::add(total, o[u][j]);
    simd::store(out + L * j, total);
  }
}

template <class W, int... HV>
KernelPair<W> kernels_up_to(int64_t vectors, std::integer_sequence<int, HV...>) {
  KernelPair<W> found{nullptr, nullptr};
  ((vectors == HV + 1 ? (found = {scores<W, HV + 1>, weighted_sum<W, HV + 1>}, 0) : 0), ...);
  return found;
}

// The vectorised pair for head_dim = L * HV up to 128, or nulls.
template <class W>
KernelPair<W> simd_kernels(int64_t head_dim) {
  if (head_dim % L != 0 || head_dim > 128) return {nullptr, nullptr};
  return kernels_up_to<W>(head_dim / L, std::make_integer_sequence<int, 128 / L>());
}
#else
template <class W>
KernelPair<W> simd_kernels(int64_t) { return {nullptr, nullptr}; }
#endif

// The two block operations of attention over caches of type W (simd::F32 or simd::F16), for one
// head size: the vectorised kernels where the head is whole vectors, otherwise Eigen (an f32
// cache) or plain loops (f16).
// note: within a block of the cache, keys and values of one KV head are contiguous rows of head_dim
// (head-major), so a run of a head's keys is a (n, head_dim) matrix with row stride head_dim.
template <class W>
class HeadBlocks {
 public:
  using Stored = typename W::Stored;
  HeadBlocks(int64_t head_dim, float scale)
      : head_dim_(head_dim), scale_(scale), kernels_(simd_kernels<W>(head_dim)) {
    if (!kF32Cache && kernels_.first == nullptr) kernels_ = {scores_scalar<W>, weighted_sum_scalar<W>};
  }
  // score (n) = keys (n, head_dim) q * scale; the n_next rows of `next` are prefetched.
  void scores(float* score, const float* q, const Stored* keys, int64_t n, const Stored* next, int64_t n_next) const {
    if (kernels_.first != nullptr) {
      kernels_.first(score, q, keys, head_dim_, n, scale_, next, n_next);
    } else if constexpr (kF32Cache) {
      Vector(score, n).noalias() = (Rows(keys, n, head_dim_, Eigen::OuterStride<>(head_dim_)) * ConstVector(q, head_dim_)) * scale_;
    }
  }
  // out (head_dim) (+)= values (n, head_dim)^T p; the n_next rows of `next` are prefetched.
  void weighted_sum(float* out, const float* p, const Stored* values, int64_t n, bool accumulate, const Stored* next,
                    int64_t n_next) const {
    if (kernels_.second != nullptr) {
      kernels_.second(out, p, values, head_dim_, n, accumulate, next, n_next);
    } else if constexpr (kF32Cache) {
      Rows v(values, n, head_dim_, Eigen::OuterStride<>(head_dim_));
      if (accumulate) {
        Vector(out, head_dim_).noalias() += v.transpose() * ConstVector(p, n);
      } else {
        Vector(out, head_dim_).noalias() = v.transpose() * ConstVector(p, n);
      }
    }
  }
  int64_t head_dim() const { return head_dim_; }

 private:
  static constexpr bool kF32Cache = std::is_same_v<W, simd::F32>;
  int64_t head_dim_;
  float scale_;
  KernelPair<W> kernels_;
};

// Where the keys and values of one (sequence, KV head) lie: in runs of contiguous rows, one run
// per block of the sequence's table (kernels/ref/kv_store.h). Key i is position first + i.
// note: the blocks are walked by index, with one division per walk, not one per run: at 16 keys
// a run, an integer division per run and pointer cost about as much as the run's arithmetic.
template <class W>
struct HeadKeys {
  using Stored = typename W::Stored;
  const Stored* k_head;    // this KV head's rows in block 0 of the pool (n_blocks, n_kv_heads, block_size, head_dim)
  const Stored* v_head;
  const int32_t* blocks;   // the sequence's row of the block table
  int64_t block_stride;    // elements from one block to the next: n_kv_heads * block_size * head_dim
  int64_t block_size, head_dim;
  int64_t first, n_keys;   // keys at positions first .. first + n_keys - 1
  int64_t last_block;      // the table entry of the last key

  HeadKeys() = default;
  HeadKeys(const AttentionArgs& a, int64_t m, int64_t kv_head)
      : block_stride(a.n_kv_heads * a.table.block_size * a.head_dim), block_size(a.table.block_size),
        head_dim(a.head_dim), first(attention_first_key(a.pos[m], a.window)), n_keys(a.pos[m] + 1 - first),
        last_block(a.pos[m] / a.table.block_size) {
    const int64_t head = kv_head * block_size * head_dim;
    k_head = static_cast<const Stored*>(a.k_cache) + head;
    v_head = static_cast<const Stored*>(a.v_cache) + head;
    blocks = a.table.blocks + a.seq[m] * a.table.width;
  }
  int64_t block_offset(int64_t entry) const { return blocks[entry] * block_stride; }
  bool same_keys(const HeadKeys& other) const { return k_head == other.k_head && blocks == other.blocks; }
};

// One (row, head) of attention: its query and output, its KV head's keys and values up to its
// position, and the next task's, whose first block is prefetched at the end of this one (see
// for_each_run).
template <class W>
struct HeadTask {
  const float* q;            // (head_dim)
  float* out;                // (head_dim)
  HeadKeys<W> keys;
  HeadKeys<W> next;          // next.n_keys == 0 when there is no next task
  bool keys_cached = false;  // the head just run on this thread read the same keys (another query head of the group)
};

// The keys [i0, i1) of a task, run by run: visit(offset of the run from i0, n, keys, values,
// ahead_keys, ahead_values, n_ahead), where `ahead` is the rest of the next block from its first
// key (the next task's first block after this task's last), to be prefetched while this run is computed, or null
// pointers where those keys are likely cached already (read by the task before, or by this one
// for the next) or there are none.
// note: a run is one block of one head (16 KiB at 64 f32 rows of 64), and the next run of the same
// head lies in the next block of the pool, after the other heads' runs of this one (or anywhere,
// in a scattered table), where the hardware prefetcher, which stops at 4 KiB pages, does not
// follow: so the next block is asked for in software. Not when another query head of the group
// has just read it: those lines are in cache already, and asking again only costs
// (bench/results/NOTES.md, "A paged KV cache").
template <class W, class Visit>
void for_each_run(const HeadTask<W>& t, int64_t i0, int64_t i1, Visit&& visit) {
  using Stored = typename W::Stored;
  const HeadKeys<W>& keys = t.keys;
  const int64_t end = keys.first + i1;
  int64_t p = keys.first + i0, entry = p / keys.block_size, row = p - entry * keys.block_size;
  while (p < end) {
    const int64_t n = std::min(keys.block_size - row, end - p);
    const int64_t at = keys.block_offset(entry) + row * keys.head_dim;
    const HeadKeys<W>* owner = &keys;
    int64_t ahead = entry + 1, ahead_row = 0;  // the block asked for, and its first row wanted
    bool cold = !t.keys_cached;
    if (ahead > keys.last_block) {
      owner = &t.next;
      ahead = t.next.n_keys > 0 ? t.next.first / t.next.block_size : 0;
      ahead_row = t.next.n_keys > 0 ? t.next.first - ahead * t.next.block_size : 0;
      cold = t.next.n_keys > 0 && !t.next.same_keys(keys);
    }
    const bool prefetch = cold && ahead <= owner->last_block;
    const int64_t ahead_at = prefetch ? owner->block_offset(ahead) + ahead_row * owner->head_dim : 0;
    const Stored* ahead_k = prefetch ? owner->k_head + ahead_at : nullptr;
    const Stored* ahead_v = prefetch ? owner->v_head + ahead_at : nullptr;
    visit(p - keys.first - i0, n, keys.k_head + at, keys.v_head + at, ahead_k, ahead_v,
          prefetch ? owner->block_size - ahead_row : 0);
    p += n;
    ++entry;
    row = 0;
  }
}

// note: the scratch buffers are 64-byte aligned like every other buffer: Eigen's vectorised sums
// start with a scalar prologue up to the first aligned element, so a buffer whose alignment
// differed from thread to thread would make the result depend on which thread ran the task.
using Scratch = std::vector<float, Eigen::aligned_allocator<float>>;

// score[0 .. i1 - i0) = the scores of keys [i0, i1), then out (+)= their weighted sum with p
// (two passes over the runs; `weigh` runs between them, on the scores).
template <class W, class Weigh>
void attend_keys(const HeadBlocks<W>& blocks, const HeadTask<W>& t, int64_t i0, int64_t i1, float* score,
                 Weigh&& weigh) {
  using Stored = typename W::Stored;
  for_each_run(t, i0, i1, [&](int64_t at, int64_t n, const Stored* k, const Stored*, const Stored* next_k,
                              const Stored*, int64_t n_next) { blocks.scores(score + at, t.q, k, n, next_k, n_next); });
  weigh();
  for_each_run(t, i0, i1, [&](int64_t at, int64_t n, const Stored*, const Stored* v, const Stored*,
                              const Stored* next_v, int64_t n_next) {
    blocks.weighted_sum(t.out, score + at, v, n, true, next_v, n_next);
  });
}

// Three passes: all scores, their softmax, the weighted sum of the values.
template <class W>
void attend_three_pass(const HeadBlocks<W>& blocks, const HeadTask<W>& t, Scratch& scratch) {
  const int64_t n_keys = t.keys.n_keys;
  scratch.resize(static_cast<size_t>(n_keys));
  Vector score(scratch.data(), n_keys);
  Vector(t.out, blocks.head_dim()).setZero();
  attend_keys(blocks, t, 0, n_keys, score.data(), [&] {
    const float max_score = score.maxCoeff();
    score = (score.array() - max_score).exp().matrix();
    score /= score.sum();
  });
}

// One pass over blocks of kKeyBlock keys with the online softmax (kernels/ref/online_softmax.h),
// for the query heads `t` of one KV head (their tasks, n of them: one row's heads that share these
// keys): the output so far is rescaled whenever a block raises the running maximum, and divided by
// the running sum at the end.
// note: each block of keys and values is read by every head of the group in turn before the next
// block, so the heads after the first find it in L1 or L2; a head at a time over all the keys
// left the second and third heads of SmolLM2's 9 on 3 KV heads to read them from L2 or L3 again
// (bench/results/NOTES.md, "Decode attention: prefetching into L2, a KV head at a time").
template <class W>
void attend_online_softmax(const HeadBlocks<W>& blocks, const HeadTask<W>* t, int64_t n, Scratch& scratch) {
  scratch.resize(static_cast<size_t>(kKeyBlock));
  OnlineSoftmax state[kMaxGroup];
  for (int64_t h = 0; h < n; ++h) Vector(t[h].out, blocks.head_dim()).setZero();
  const int64_t n_keys = t[0].keys.n_keys;
  for (int64_t t0 = 0; t0 < n_keys; t0 += kKeyBlock) {
    const int64_t n_block = std::min(kKeyBlock, n_keys - t0);
    Vector score(scratch.data(), n_block);
    for (int64_t h = 0; h < n; ++h) {
      Vector out(t[h].out, blocks.head_dim());
      attend_keys(blocks, t[h], t0, t0 + n_block, score.data(), [&] {
        const float correction = state[h].raise_max(score.maxCoeff());
        // softmax_rescale(score, max) over the block, vectorized: the scores are finite here.
        score = (score.array() - state[h].max).exp().matrix();
        state[h].sum += score.sum();
        out = out * correction;
      });
    }
  }
  for (int64_t h = 0; h < n; ++h) Vector(t[h].out, blocks.head_dim()) /= state[h].sum;
}

// Every task of one attention call over caches of type W, on the thread pool: a task is one
// (row, head), or with the online softmax one (row, KV head), all the query heads that share it.
// note: a KV head at a time gives a thread `group` times fewer, longer tasks; it is taken where
// there are at least 4 a thread, so that one sequence's decode at B = 1 (3 tasks on 2 threads at
// SmolLM2's 3 KV heads) still splits by query head.
template <AttentionAlgorithm A, class W>
void attention_over(ThreadPool& pool, const AttentionArgs& a) {
  const HeadBlocks<W> blocks(a.head_dim, a.scale);
  const int64_t group = a.n_heads / a.n_kv_heads;
  const bool by_kv_head = A == AttentionAlgorithm::online_softmax && group > 1 && group <= kMaxGroup &&
                          a.M * a.n_kv_heads >= 4 * int64_t(pool.size());
  const int64_t heads_a_task = by_kv_head ? group : 1, tasks_a_row = a.n_heads / heads_a_task;
  // Query head h of row m, with its keys and values (the next task's, whose first block is
  // prefetched, set by the caller).
  auto head_task = [&](int64_t m, int64_t h) {
    return HeadTask<W>{a.q + m * a.ld_q + h * a.head_dim, a.out + m * a.ld_out + h * a.head_dim,
                       HeadKeys<W>(a, m, h / group), {}};
  };
  auto first_keys = [&](int64_t task) {
    return HeadKeys<W>(a, task / tasks_a_row, task % tasks_a_row * heads_a_task / group);
  };
  // `first`: the first task of this thread's range; the next, whose keys are prefetched, is
  // task + 1 if it is below `end`.
  auto run_task = [&](int64_t task, int64_t first, int64_t end) {
    const int64_t m = task / tasks_a_row, h0 = task % tasks_a_row * heads_a_task;
    HeadTask<W> t[kMaxGroup];
    for (int64_t i = 0; i < heads_a_task; ++i) {
      t[i] = head_task(m, h0 + i);
      t[i].keys_cached = i > 0;  // the head before read these keys a moment ago
    }
    if (task + 1 < end) t[heads_a_task - 1].next = first_keys(task + 1);
    t[0].keys_cached = task > first && first_keys(task - 1).same_keys(t[0].keys);
    thread_local Scratch scratch;  // grows once
    if (A == AttentionAlgorithm::three_pass) attend_three_pass(blocks, t[0], scratch);
    else attend_online_softmax(blocks, t, heads_a_task, scratch);
  };
  const int64_t tasks = a.M * tasks_a_row;
  if (pool.size() == 1 || tasks == 1) {
    for (int64_t t = 0; t < tasks; ++t) run_task(t, 0, tasks);
  } else {
    pool.parallel_for(tasks, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) run_task(t, t0, t1);
    });
  }
}

}  // namespace

template <AttentionAlgorithm A>
void attention(ThreadPool& pool, const AttentionArgs& a) {
  if (a.cache_dtype == DType::f16) {
    attention_over<A, simd::F16>(pool, a);
  } else {
    MINFER_CHECK(a.cache_dtype == DType::f32, "attention: the CPU keeps an f32 or f16 KV cache, not ",
                 dtype_name(a.cache_dtype));
    attention_over<A, simd::F32>(pool, a);
  }
}

template void attention<AttentionAlgorithm::three_pass>(ThreadPool&, const AttentionArgs&);
template void attention<AttentionAlgorithm::online_softmax>(ThreadPool&, const AttentionArgs&);

}  // namespace minfer::cpu
