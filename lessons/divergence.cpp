// demo divergence: the branch tax.
// CPU: one loop with a data-dependent branch over bytes, on sorted and on shuffled data, and its
// branchless form. Sorted, the branch predictor guesses right almost always; shuffled, it is
// wrong half the time and every miss flushes the pipeline. The branchless form does the same
// arithmetic on both.
// CUDA: a kernel whose threads branch on random data against its branchless form, then a kernel
// where the 32 lanes of a warp take 1, 2, 4 ... 32 different paths: a warp executes its paths
// one after the other, so time grows with the number of paths.
#include <algorithm>
#include <random>

#include "core/error.h"
#include "lessons/cuda_lessons.h"
#include "lessons/demos.h"

namespace minfer::demo {

namespace {

// The empty asm in the taken branch keeps the compiler from turning it into a conditional move
// or vectorising it away: the branch stays a branch.
__attribute__((noinline)) int64_t branchy_sum(const uint8_t* data, int64_t n) {
  int64_t sum = 0;
  for (int64_t i = 0; i < n; ++i)
    if (data[i] >= 128) {
      sum += data[i];
      __asm__ volatile("" ::: "memory");
    }
  return sum;
}

__attribute__((noinline)) int64_t branchless_sum(const uint8_t* data, int64_t n) {
  int64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += data[i] & -static_cast<int64_t>(data[i] >= 128);
  return sum;
}

}  // namespace

void divergence(const Options& o) {
  Report r("divergence", "the branch tax: predictable and unpredictable branches, divergent warps");
  const int64_t n = o.quick ? (int64_t(1) << 22) : (int64_t(1) << 25);
  std::vector<uint8_t> shuffled(static_cast<size_t>(n));
  std::mt19937 rng(1);
  for (auto& v : shuffled) v = static_cast<uint8_t>(rng());
  std::vector<uint8_t> sorted = shuffled;
  std::sort(sorted.begin(), sorted.end());
  int64_t sink = 0;
  auto ns_per = [&](auto fn, const std::vector<uint8_t>& data) {
    return median_seconds(o.quick ? 3 : 7, [&] { sink += fn(data.data(), n); }) / double(n) * 1e9;
  };
  const double sorted_branchy = ns_per(branchy_sum, sorted), shuffled_branchy = ns_per(branchy_sum, shuffled);
  const double sorted_branchless = ns_per(branchless_sum, sorted), shuffled_branchless = ns_per(branchless_sum, shuffled);
  MINFER_CHECK(branchy_sum(sorted.data(), n) == branchless_sum(shuffled.data(), n), "divergence: the sums differ");
  print_table({"CPU loop", "data", "ns per element", "vs sorted branchy"},
              {{"branchy", "sorted", fmt("%.3f", sorted_branchy), "1.00x"},
               {"branchy", "shuffled", fmt("%.3f", shuffled_branchy), fmt("%.2fx", shuffled_branchy / sorted_branchy)},
               {"branchless", "sorted", fmt("%.3f", sorted_branchless), fmt("%.2fx", sorted_branchless / sorted_branchy)},
               {"branchless", "shuffled", fmt("%.3f", shuffled_branchless), fmt("%.2fx", shuffled_branchless / sorted_branchy)}});
  r.bar("cpu", "branchy, sorted", sorted_branchy);
  r.bar("cpu", "branchy, shuffled", shuffled_branchy);
  r.bar("cpu", "branchless, sorted", sorted_branchless);
  r.bar("cpu", "branchless, shuffled", shuffled_branchless);
  r.ran("cpu");
  r.conclude("cpu", fmt("the same branchy loop is %.1fx slower on shuffled data than on sorted data", shuffled_branchy / sorted_branchy) +
                        ": the predictor misses half the branches; the branchless loop takes " +
                        fmt("%.2f", sorted_branchless) + " and " + fmt("%.2f ns", shuffled_branchless) +
                        " on either, because it has nothing to predict");

  if (!o.cuda) {
    r.skipped("cuda", "no CUDA device (" + o.cuda_reason + ")");
  } else {
    const int64_t elements = o.quick ? (int64_t(1) << 22) : (int64_t(1) << 26);
    const double branchy_ms = cuda_lessons::branch_kernel_seconds(elements, false) * 1e3;
    const double branchless_ms = cuda_lessons::branch_kernel_seconds(elements, true) * 1e3;
    std::vector<std::vector<std::string>> rows;
    std::vector<double> ms_by_paths;
    for (int paths : {1, 2, 4, 8, 16, 32}) {
      const double ms = cuda_lessons::warp_paths_seconds(paths) * 1e3;
      ms_by_paths.push_back(ms);
      rows.push_back({std::to_string(paths), fmt("%.3f", ms), fmt("%.2fx", ms / ms_by_paths[0])});
      r.point("cuda", "paths per warp", paths, ms);
    }
    const double one = ms_by_paths.front(), two = ms_by_paths[1], last = ms_by_paths.back();
    print_table({"CUDA kernel", "ms"}, {{"branch on random data", fmt("%.3f", branchy_ms)},
                                        {"branchless", fmt("%.3f", branchless_ms)}});
    print_table({"paths per warp", "ms", "vs 1 path"}, rows);
    r.point("cuda", "branch on random data", NAN, branchy_ms, "branchy kernel");
    r.point("cuda", "branchless", NAN, branchless_ms, "branchless kernel");
    r.ran("cuda");
    r.conclude("cuda", fmt("a warp whose lanes take 32 different paths runs %.1fx as long as one whose lanes agree", last / one) +
                           fmt(" (%.1fx for 2 paths): divergent lanes wait while the others run", two / one) +
                           fmt("; random data costs the branchy kernel %.2fx its branchless form", branchy_ms / branchless_ms));
  }
  r.axes("paths per warp (CUDA); CPU: loop and data", "ns per element (CPU), ms (CUDA)", true, false);
  r.write(o.out_dir);
  (void)sink;
}

}  // namespace minfer::demo
