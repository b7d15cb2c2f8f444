// Byte-pair merging in O(n log n): the loop at the heart of every BPE tokenizer.
//
// Given a sequence of symbols (token ids) and a rule that says whether two adjacent symbols merge
// (into which symbol, with which priority), merge the pair of highest priority, and of those the
// leftmost, until no adjacent pair merges. That is run.c's encode (priority = the merged piece's
// score) and GPT-2's BPE (priority = minus the rank of the pair in the merges list).
//
// Rescanning every pair after every merge, as run.c does, costs O(n^2): 30 KB of text took 20 s.
// Here the candidate pairs sit in a heap ordered by (priority, position); symbols form a linked
// list; a merge links the merged symbol in place of the left one, retires the right one, and
// offers the two new pairs it forms with its neighbours. A candidate whose symbols changed since
// it was offered is stale and skipped when it reaches the top. Positions are the symbols' original
// indices, which keep their order as symbols merge, so "leftmost" means what it means in run.c.
#pragma once

#include <cstdint>
#include <queue>
#include <vector>

namespace minfer {

// rule(left, right, &merged, &priority) -> bool: whether `left right` merges.
template <class Rule>
void bpe_merge(std::vector<int32_t>& symbols, Rule&& rule) {
  const int64_t n = static_cast<int64_t>(symbols.size());
  if (n < 2) return;
  std::vector<int64_t> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    double priority;
    int64_t left, right;       // positions
    int32_t left_id, right_id;  // the symbols when offered
    int32_t merged;
    bool operator<(const Candidate& o) const {  // the heap's top: highest priority, then leftmost
      return priority != o.priority ? priority < o.priority : left > o.left;
    }
  };
  std::priority_queue<Candidate> heap;
  auto offer = [&](int64_t left, int64_t right) {
    if (left < 0 || right < 0) return;
    int32_t merged = 0;
    double priority = 0.0;
    if (rule(symbols[left], symbols[right], &merged, &priority))
      heap.push({priority, left, right, symbols[left], symbols[right], merged});
  };
  for (int64_t i = 0; i + 1 < n; ++i) offer(i, i + 1);
  std::vector<bool> alive(static_cast<size_t>(n), true);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (!alive[c.left] || !alive[c.right] || next[c.left] != c.right || symbols[c.left] != c.left_id ||
        symbols[c.right] != c.right_id)
      continue;  // stale: one of its symbols merged since it was offered
    symbols[c.left] = c.merged;
    alive[c.right] = false;
    next[c.left] = next[c.right];
    if (next[c.right] >= 0) prev[next[c.right]] = c.left;
    offer(prev[c.left], c.left);
    offer(c.left, next[c.left]);
  }
  int64_t out = 0;
  for (int64_t i = 0; i < n; ++i)
    if (alive[i]) symbols[out++] = symbols[i];
  symbols.resize(static_cast<size_t>(out));
}

}  // namespace minfer
