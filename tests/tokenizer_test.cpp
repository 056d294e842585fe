// Why this file exists: the byte-level tokenizer (train/tokenizer.h) promises lossless
// round trips for any bytes, special ids outside the byte range, and clear errors for ids
// that are not tokens.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "error_helpers.h"
#include "train/tokenizer.h"

namespace cg {
namespace {

using train::ByteTokenizer;

TEST(Tokenizer, SpecialIdsAreDistinctAndAfterTheBytes) {
  const ByteTokenizer tok;
  const std::set<int64_t> specials{tok.bos_id(), tok.eos_id(), tok.pad_id(), tok.mask_id()};
  EXPECT_EQ(specials.size(), 4u);
  for (int64_t id : specials) {
    EXPECT_GE(id, 256);
    EXPECT_LT(id, tok.vocab_size());
    EXPECT_TRUE(ByteTokenizer::is_special(id));
  }
  EXPECT_EQ(tok.vocab_size(), 260);
  EXPECT_FALSE(ByteTokenizer::is_special(255));
  EXPECT_FALSE(ByteTokenizer::is_special(0));
}

TEST(Tokenizer, Utf8RoundTripsByteForByte) {
  const ByteTokenizer tok;
  const std::string text = "héllo, 世界! 🙂\n\ttabs and \"quotes\"";
  const auto ids = tok.encode(text);
  EXPECT_EQ(ids.size(), text.size());  // one id per byte, not per character
  EXPECT_EQ(ids[1], 0xC3);             // 'é' is C3 A9
  EXPECT_EQ(ids[2], 0xA9);
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(Tokenizer, EveryByteRoundTripsEvenInvalidUtf8) {
  const ByteTokenizer tok;
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  all += "\xff\xfe\x80";  // not UTF-8
  const auto ids = tok.encode(all);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[static_cast<size_t>(b)], b);
  EXPECT_EQ(tok.decode(ids), all);
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.decode({}), "");
}

TEST(Tokenizer, BosEosAndSpecialsInDecode) {
  const ByteTokenizer tok;
  const auto ids = tok.encode("ab", {.bos = true, .eos = true});
  EXPECT_EQ(ids, (std::vector<int64_t>{ByteTokenizer::kBos, 'a', 'b', ByteTokenizer::kEos}));
  EXPECT_EQ(tok.decode(ids), "ab");
  EXPECT_EQ(tok.decode(ids, /*keep_special=*/true), "<|bos|>ab<|eos|>");
  EXPECT_EQ(tok.decode({'x', ByteTokenizer::kMask, ByteTokenizer::kPad}, true), "x<|mask|><|pad|>");
}

TEST(Tokenizer, TokenStrIsReadable) {
  const ByteTokenizer tok;
  EXPECT_EQ(tok.token_str('a'), "a");
  EXPECT_EQ(tok.token_str('\n'), "<0x0A>");
  EXPECT_EQ(tok.token_str(0xE4), "<0xE4>");
  EXPECT_EQ(tok.token_str(ByteTokenizer::kMask), "<|mask|>");
}

TEST(Tokenizer, IdsOutsideTheVocabularyAreRefused) {
  const ByteTokenizer tok;
  EXPECT_ERROR_HAS(tok.decode({'a', 260}), "id 260", "index 1", "0..255");
  EXPECT_ERROR_HAS(tok.decode({-1}), "id -1", "index 0");
  EXPECT_ERROR_HAS(tok.token_str(1000), "id 1000");
  EXPECT_ERROR_HAS(ByteTokenizer::special_name('a'), "not a special id");
}

// A target loaded from a checkpoint may have more ids than the bytes' (its output in the
// run's summary failed to decode): shown, not refused.
TEST(Tokenizer, DecodeForDisplayShowsIdsPastTheVocabulary) {
  const ByteTokenizer tok;
  EXPECT_EQ(tok.decode_for_display({'a', 578, ByteTokenizer::kEos, 'b', -3}), "a<id 578>b<id -3>");
}

}  // namespace
}  // namespace cg
