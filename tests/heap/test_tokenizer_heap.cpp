// What encoding a long text holds on the heap: its own binary, since it replaces the global
// operator new with one that tracks the bytes live and their peak (and is not built under
// AddressSanitizer, which replaces operator new itself). A text is encoded piece by piece, each
// piece's ids made before the next piece is cut, so that a long text holds its ids and a few
// copies of its bytes, never a list of its pieces (TextTokenizer::encode); with max_ids, the
// encoding stops once the ids pass it.
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "tokenizers/text_tokenizer.h"

namespace {
std::atomic<long> live{0}, peak{0}, allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  const long now = live.fetch_add(static_cast<long>(malloc_usable_size(p))) + static_cast<long>(malloc_usable_size(p));
  long seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
  allocations.fetch_add(1);
  return p;
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept {
  if (p != nullptr) live.fetch_sub(static_cast<long>(malloc_usable_size(p)));
  std::free(p);
}
void operator delete[](void* p) noexcept { operator delete(p); }
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }
void operator delete[](void* p, std::size_t) noexcept { operator delete(p); }

namespace minfer {
namespace {

struct HeapUse {
  long peak_growth;  // bytes above those live before
  long allocations;
};
template <class Fn>
HeapUse heap_use(Fn&& fn) {
  const long before = live.load(), allocations_before = allocations.load();
  peak = before;
  fn();
  return {peak.load() - before, allocations.load() - allocations_before};
}

std::unique_ptr<TextTokenizer> smollm() {
  return load_tokenizer_json(std::string(MINFER_SOURCE_DIR) + "/tests/data/tokenizers/smollm-bpe/tokenizer.json");
}

// Words and spaces: a piece every few bytes, as in a prose prompt.
std::string prose(size_t bytes) {
  const char* const words[] = {"the", "cat", "sat", "on", "a", "mat,", "and", "then", "ran", "away.", "12345", "\n"};
  std::mt19937 random(7);
  std::string text;
  while (text.size() < bytes) text += std::string(" ") + words[random() % (sizeof(words) / sizeof(words[0]))];
  text.resize(bytes);
  return text;
}

TEST(TokenizerHeap, ALongTextHoldsItsIdsAndItsBytesNotItsPieces) {
  const auto t = smollm();
  const std::string text = prose(1 << 20);
  std::vector<int32_t> ids;
  const HeapUse use = heap_use([&] { ids = t->encode(text, false); });
  const long ids_bytes = static_cast<long>(ids.capacity() * sizeof(int32_t));
  std::printf("[ heap     ] %zu bytes -> %zu ids: peak %.1f MiB above the start (%.1f MiB of ids)\n", text.size(),
              ids.size(), use.peak_growth / 1048576.0, ids_bytes / 1048576.0);
  ASSERT_GT(ids.size(), text.size() / 8);
  // A few copies of the text while added tokens and the normalizer cut it, and the ids as their
  // vector grows (twice their size while it moves); a list of the text's pieces, 40 bytes or more
  // each, would be ten times the text.
  EXPECT_LT(use.peak_growth, 5 * static_cast<long>(text.size()) + 2 * ids_bytes);
}

TEST(TokenizerHeap, EncodingStopsOnceTheIdsPassTheLimit) {
  const auto t = smollm();
  const std::string text = prose(64 << 10);
  const size_t all = t->encode(text, false).size();
  // The fewest ids whose limit the text's length passes: prose has 5 bytes a token or so, the
  // longest token 50.
  const size_t max_ids = (text.size() + t->max_bytes_per_token() - 1) / t->max_bytes_per_token();
  ASSERT_GT(all, 8 * max_ids);
  const HeapUse whole = heap_use([&] { t->encode(text, false); });
  const HeapUse stopped = heap_use([&] { EXPECT_THROW(t->encode(text, false, max_ids), TooManyTokens); });
  std::printf("[ heap     ] %zu ids: %ld allocations; stopped past %zu: %ld\n", all, whole.allocations, max_ids,
              stopped.allocations);
  EXPECT_LT(stopped.allocations * 5, whole.allocations) << "the encoding went on past the limit";
}

}  // namespace
}  // namespace minfer
