// A text's tokens against a limit (TextTokenizer::encode's max_ids), without encoding more than the
// limit needs: each tokenizer's bound on the bytes one token stands for, the check of a text's
// length against it at the boundary, and a chat's rendered conversation held to the same limit.
// (That the bound never refuses a text that fits, and that max_ids allows exactly the text's ids,
// is checked on every fixture case in test_text_tokenizer.cpp; that the encoding stops early and
// holds no list of pieces, in tests/heap/test_tokenizer_heap.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tokenizers/chat_format.h"
#include "tokenizers/text_tokenizer.h"

namespace minfer {
namespace {

std::unique_ptr<TextTokenizer> fixture(const std::string& name) {
  return load_tokenizer_json(std::string(MINFER_SOURCE_DIR) + "/tests/data/tokenizers/" + name + "/tokenizer.json");
}

// The bound of each fixture: its longest token's text in bytes (GPT-2's stand-ins for bytes, or
// "▁" for a space, count as the vocabulary spells them), and none where an added token swallows
// white space. Each token's own text, with and without its leading space (the texts whose bytes a
// token stands for most densely), takes no fewer tokens than the bound says.
TEST(TokenizerLimits, EachTokenizerBoundsTheBytesATokenStandsFor) {
  for (const char* name : {"spm-bpe", "spm-metaspace", "llama3-bpe", "smollm-bpe", "gpt2-bpe"}) {
    const auto t = fixture(name);
    const size_t bound = t->max_bytes_per_token();
    EXPECT_GT(bound, 0u) << name;
    EXPECT_LT(bound, 256u) << name;
    size_t densest = 0;  // the most bytes one token of these texts stands for
    for (int32_t id = 0; id < t->vocab_size(); ++id) {
      const std::string piece = t->token_bytes(id, id);
      for (const std::string& text : {piece, piece.substr(piece.find_first_not_of(' ') == 0 ? 0 : 1)}) {
        const std::vector<int32_t> ids = t->encode(text, false);
        if (ids.empty()) continue;
        EXPECT_LE(text.size(), ids.size() * bound) << name << ": " << text;
        densest = std::max(densest, (text.size() + ids.size() - 1) / ids.size());
      }
    }
    std::printf("[ bound    ] %s: %zu bytes a token; its tokens' own texts: up to %zu\n", name, bound, densest);
  }
  EXPECT_EQ(fixture("added-tokens")->max_bytes_per_token(), 0u);
}

TEST(TokenizerLimits, TheLengthCheckRefusesOneBytePastTheBound) {
  EXPECT_NO_THROW(check_text_bytes(100, 10, 10));
  try {
    check_text_bytes(101, 10, 10);
    ADD_FAILURE() << "101 bytes at 10 a token fit in 10 tokens";
  } catch (const TooManyTokens& e) {
    EXPECT_EQ(e.max_ids, 10u);
    EXPECT_EQ(e.text_bytes, 101u);
    EXPECT_EQ(e.bytes_per_token, 10u);
    EXPECT_NE(std::string(e.what()).find("a text of 101 bytes has more than 10 tokens"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_text_bytes(0, 0, 10));
  EXPECT_THROW(check_text_bytes(1, 0, 10), TooManyTokens);
  EXPECT_NO_THROW(check_text_bytes(1000, 1, 0)) << "no bound: nothing is known from the length";
  // No overflow: max_ids x bound past size_t's range bounds nothing.
  EXPECT_NO_THROW(check_text_bytes(kNoTokenLimit, kNoTokenLimit / 2 + 1, 2));
  EXPECT_THROW(check_text_bytes(kNoTokenLimit, kNoTokenLimit / 2 - 1, 2), TooManyTokens);
  EXPECT_NO_THROW(check_text_bytes(kNoTokenLimit, kNoTokenLimit, 1000));
}

// A text one byte past max_ids x the bound is refused by its length, before it is encoded; at the
// bound it is encoded (and then refused only if its ids are more).
TEST(TokenizerLimits, EncodeRefusesALongTextByItsLength) {
  const auto t = fixture("smollm-bpe");
  const size_t bound = t->max_bytes_per_token(), max_ids = 40;
  const std::string fits(max_ids * bound, 'a'), over(max_ids * bound + 1, 'a');
  try {
    t->encode(fits, true, max_ids);
  } catch (const TooManyTokens& e) {
    EXPECT_EQ(e.bytes_per_token, 0u) << "refused by its length at the bound: " << e.what();
  }
  try {
    t->encode(over, true, max_ids);
    ADD_FAILURE() << "a text past the bound was encoded";
  } catch (const TooManyTokens& e) {
    EXPECT_EQ(e.bytes_per_token, bound) << e.what();
    EXPECT_EQ(e.text_bytes, over.size());
  }
}

// The special tokens add_special puts around a text count toward max_ids.
TEST(TokenizerLimits, SpecialTokensCountTowardTheLimit) {
  const auto t = fixture("llama3-bpe");
  const std::vector<int32_t> ids = t->encode("Hello there", true);
  ASSERT_EQ(ids.size(), t->encode("Hello there", false).size() + 1) << "llama3-bpe adds BOS";
  EXPECT_EQ(t->encode("Hello there", true, ids.size()), ids);
  EXPECT_THROW(t->encode("Hello there", true, ids.size() - 1), TooManyTokens);
}

// A conversation: exactly its ids allowed, one fewer refused; a long one refused by the rendered
// text's length (the template's own text included), before it is encoded.
TEST(TokenizerLimits, AChatIsHeldToTheLimitAfterItsTemplate) {
  const auto t = fixture("smollm-bpe");
  const ChatFormat format(*t, "chatml");
  const std::vector<ChatMessage> chat = {{"system", "Be brief."}, {"user", "What is 12 + 30?"}};
  const std::vector<int32_t> ids = format.encode(chat, true);
  EXPECT_EQ(format.encode(chat, true, ids.size()), ids);
  EXPECT_THROW(format.encode(chat, true, ids.size() - 1), TooManyTokens);
  const size_t max_ids = 64;
  const std::vector<ChatMessage> tiny_long = {{"user", std::string(max_ids * t->max_bytes_per_token(), 'a')}};
  try {
    format.encode(tiny_long, true, max_ids);
    ADD_FAILURE() << "a conversation past the bound was encoded";
  } catch (const TooManyTokens& e) {
    EXPECT_EQ(e.bytes_per_token, t->max_bytes_per_token()) << "the template's text counts: " << e.what();
    EXPECT_GT(e.text_bytes, max_ids * t->max_bytes_per_token());
  }
}

}  // namespace
}  // namespace minfer
