// Why this file exists: HfTokenizer (train/hf_tokenizer.h) on a tokenizer.json small
// enough to work its ids out by hand (tests/hf_tokenizer_test_util.h has the table): the
// split regex, merge order, added tokens inside text, NFC, the hard strings' round trip,
// and one clear error per malformed field. The comparison with Hugging Face `tokenizers`
// itself is hf_tokenizer_golden_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "hf_tokenizer_test_util.h"
#include "train/hf_tokenizer.h"

namespace {

using cg::train::HfTokenizer;
using Ids = std::vector<int64_t>;
using nlohmann::json;

const HfTokenizer& tiny() {
  static const HfTokenizer tok =
      HfTokenizer::from_json(hf_tokenizer_test::tiny_tokenizer_json().dump(), "tiny");
  return tok;
}

Ids bytes_of(const std::string& s) {
  Ids ids;
  for (unsigned char c : s) ids.push_back(c);
  return ids;
}

TEST(HfTokenizer, MergesByRankLeftmostFirst) {
  EXPECT_EQ(tiny().encode("the"), (Ids{116, 257}));  // h e, then no Ġ to join
  EXPECT_EQ(tiny().encode(" the"), (Ids{258}));      // Ġ t, h e, Ġt he
  EXPECT_EQ(tiny().encode("hello"), (Ids{257, 260}));
  EXPECT_EQ(tiny().encode("aaa"), (Ids{262}));         // aa first (rank 5), then aa a
  EXPECT_EQ(tiny().encode("aaaa"), (Ids{261, 261}));   // leftmost aa, then the next
  EXPECT_EQ(tiny().encode("aaaaa"), (Ids{261, 262}));  // aa aa a -> aa aaa
}

TEST(HfTokenizer, TheSplitRegexKeepsPiecesApart) {
  // "go" and " there" are separate pieces: the merge "o Ġ" never applies across them.
  EXPECT_EQ(tiny().encode("go there"), (Ids{103, 111, 258, 114, 101}));
  EXPECT_EQ(tiny().encode("hello world"), (Ids{257, 260, 32, 119, 111, 114, 108, 100}));
  // Three spaces before a word: "  " (\s+(?!\S)) then " b"; trailing spaces stay one piece.
  EXPECT_EQ(tiny().encode("a   b"), (Ids{97, 263, 32, 98}));
  EXPECT_EQ(tiny().encode("a  "), (Ids{97, 263}));
  EXPECT_EQ(tiny().encode("a\r\nb"), (Ids{97, 13, 10, 98}));
  EXPECT_EQ(tiny().encode("I'm"), (Ids{73, 39, 109}));
  EXPECT_EQ(tiny().encode("2024"), bytes_of("2024"));
  EXPECT_EQ(tiny().encode(""), Ids{});
  // U+180E is not \s for `tokenizers` (Note [U+180E]): "  " then " \u180E", no ĠĠ.
  EXPECT_EQ(tiny().encode("  \xE1\xA0\x8E"), (Ids{32, 32, 0xE1, 0xA0, 0x8E}));
}

TEST(HfTokenizer, AddedTokensAreFoundBeforeTheSplit) {
  EXPECT_EQ(tiny().encode("<|im_start|>the<|im_end|>"), (Ids{300, 116, 257, 301}));
  EXPECT_EQ(tiny().encode("the<|endoftext|><|endoftext|>"), (Ids{116, 257, 302, 302}));
  EXPECT_EQ(tiny().encode("x<think>y"), (Ids{120, 303, 121}));
  // Not quite a token: plain bytes.
  EXPECT_EQ(tiny().encode("<|im_start"), bytes_of("<|im_start"));
  EXPECT_EQ(tiny().decode({300, 116, 257, 301}), "<|im_start|>the<|im_end|>");
  EXPECT_EQ(tiny().decode({300, 116, 257, 301, 303}, /*skip_special=*/true), "the<think>");
}

TEST(HfTokenizer, NormalisesToNfc) {
  // e + COMBINING ACUTE ACCENT is é (U+00E9, bytes C3 A9) after NFC.
  EXPECT_EQ(tiny().encode("e\xCC\x81"), (Ids{0xC3, 0xA9}));
  EXPECT_EQ(tiny().decode(tiny().encode("e\xCC\x81")), "\xC3\xA9");
}

TEST(HfTokenizer, VocabularyQueries) {
  EXPECT_EQ(tiny().vocab_size(), 304);
  EXPECT_EQ(tiny().token_to_id("<|im_end|>"), 301);
  EXPECT_EQ(tiny().token_to_id("\xC4\xA0the"), 258);  // "Ġthe"
  EXPECT_EQ(tiny().token_to_id("nope"), std::nullopt);
  EXPECT_EQ(tiny().id_to_token(257), "he");
  EXPECT_TRUE(tiny().is_special(300));
  EXPECT_FALSE(tiny().is_special(303));
  EXPECT_FALSE(tiny().is_special(97));
  EXPECT_THROW(tiny().decode({280}), cg::Error);  // a gap between the merges and the added
  EXPECT_THROW(tiny().decode({304}), cg::Error);
  EXPECT_THROW(tiny().decode({-1}), cg::Error);
}

// The hard strings of issue 20; all in NFC, so that decode gives them back byte for byte.
const std::vector<std::string>& hard_strings() {
  static const std::vector<std::string> s = {
      "",
      "Hello, world! The quick brown fox.",
      "Mixed: English, Русский, 日本語のテキスト, 한국어, العربية, हिन्दी, ελληνικά",
      "emoji \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 family, "
      "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD thumbs, "
      "\xF0\x9F\x8F\xB3\xEF\xB8\x8F\xE2\x80\x8D\xF0\x9F\x8C\x88 flag",
      "runs     of   spaces    ",
      "\t\ttabs\tand\nnewlines\n\n\n  indented\n",
      "windows\r\nline\r\nendings\r\n",
      "digits 1234567890 3.14159 1,000,000 0x1F",
      "contractions: I'm, you're, they've, we'll, he'd, it's, don't, CAN'T",
      "<|im_start|>user\nhi "
      "there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nok<|im_end|>",
      "special<|endoftext|>inside<|endoftext|>",
      std::string("nul \0 byte and \x7F control", 24),
      "   leading and trailing   ",
      "a",
      " ",
      "\n",
  };
  return s;
}

TEST(HfTokenizer, HardStringsRoundTrip) {
  for (const std::string& text : hard_strings()) {
    EXPECT_EQ(tiny().decode(tiny().encode(text)), text) << "text: " << text;
  }
}

TEST(HfTokenizer, VeryLongStringsAreFastAndExact) {
  // One piece of 100001 letters: the merges go left to right (49999 x aa), then aa a.
  const std::string letters(100001, 'a');
  const auto t0 = std::chrono::steady_clock::now();
  const Ids ids = tiny().encode(letters);
  ASSERT_EQ(ids.size(), 50000u);
  EXPECT_EQ(ids.front(), 261);
  EXPECT_EQ(ids.back(), 262);
  EXPECT_EQ(tiny().decode(ids), letters);
  // Every hard string, repeated up to about 1 MB, in one text.
  std::string all;
  while (all.size() < (1u << 20))
    for (const std::string& s : hard_strings()) all += s;
  EXPECT_EQ(tiny().decode(tiny().encode(all)), all);
  const std::string spaces(200000, ' ');
  EXPECT_EQ(tiny().decode(tiny().encode(spaces)), spaces);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 20.0) << "encoding about 1.3 MB took " << seconds << " s";
}

TEST(HfTokenizer, InvalidUtf8IsOneClearError) {
  try {
    tiny().encode(
        "a\xFF"
        "b");
    FAIL() << "no error";
  } catch (const cg::Error& e) {
    EXPECT_NE(e.message().find("not valid UTF-8 (at byte 1)"), std::string::npos) << e.message();
  }
}

// ---- malformed tokenizer.json: one error naming the field ----

void expect_error(const std::string& text, const std::string& expected) {
  try {
    HfTokenizer::from_json(text, "bad.json");
    FAIL() << "no error; expected one with '" << expected << "'";
  } catch (const cg::Error& e) {
    EXPECT_NE(e.message().find(expected), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("bad.json"), std::string::npos) << e.message();
  }
}

void expect_error(const std::function<void(json&)>& damage, const std::string& expected) {
  json j = hf_tokenizer_test::tiny_tokenizer_json();
  damage(j);
  expect_error(j.dump(), expected);
}

TEST(HfTokenizer, MalformedFilesNameTheField) {
  expect_error("{\"model\": ", "not valid JSON");
  expect_error("[1, 2]", "expected an object");
  expect_error([](json& j) { j.erase("model"); }, "model: missing");
  expect_error([](json& j) { j["model"]["type"] = "WordPiece"; }, "model.type: 'WordPiece'");
  expect_error([](json& j) { j["model"]["vocab"]["x"] = -3; }, "model.vocab['x']");
  expect_error([](json& j) { j["model"]["vocab"]["zz"] = 97; }, "id 97 is given to both");
  expect_error([](json& j) { j["model"]["vocab"].erase("a"); }, "no token for byte 97");
  expect_error(
      [](json& j) {
        j["model"]["merges"][0] = json::array({"q", "zzz"});
      },
      "model.merges[0]: 'zzz' is not in model.vocab");
  expect_error([](json& j) { j["model"]["merges"][1] = "x y"; },
               "model.merges[1]: 'x y' merges into 'xy', which model.vocab lacks");
  expect_error([](json& j) { j["model"]["merges"][2] = 7; }, "model.merges[2]: expected");
  expect_error([](json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout");
  expect_error([](json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
               "model.continuing_subword_prefix");
  expect_error([](json& j) { j["normalizer"] = {{"type", "NFKC"}}; }, "normalizer.type: 'NFKC'");
  expect_error([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a"; },
               "pre_tokenizer.pretokenizers[0].pattern.Regex: the pattern does not compile");
  expect_error([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; },
               "pre_tokenizer.pretokenizers[0].behavior");
  expect_error([](json& j) { j["pre_tokenizer"]["pretokenizers"].erase(1); }, "no ByteLevel step");
  expect_error([](json& j) { j["added_tokens"][1]["lstrip"] = true; }, "added_tokens[1].lstrip");
  expect_error([](json& j) { j["added_tokens"][0].erase("id"); }, "added_tokens[0].id: missing");
  expect_error([](json& j) { j["added_tokens"][2]["content"] = ""; }, "added_tokens[2].content");
  expect_error([](json& j) { j.erase("decoder"); }, "decoder: missing");
  expect_error([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "decoder.type");
  expect_error(
      [](json& j) {
        j["post_processor"] = {{"type", "TemplateProcessing"}};
      },
      "post_processor.type: 'TemplateProcessing'");
}

TEST(HfTokenizer, TruncationAndFixedPaddingAreRefused) {
  // `tokenizers` truncates and pads every encode as the file says; this tokenizer does
  // neither, so such a file would give other ids without a word.
  expect_error(
      [](json& j) {
        j["truncation"] = {{"max_length", 5}, {"strategy", "LongestFirst"}};
      },
      "truncation: an object with 2 keys is not supported");
  expect_error(
      [](json& j) {
        j["padding"] = {{"strategy", {{"Fixed", 512}}}, {"pad_id", 0}};
      },
      "padding.strategy: an object with 1 key is not supported");
  expect_error(
      [](json& j) {
        j["padding"] = {{"strategy", "BatchLongest"}, {"pad_to_multiple_of", 8}};
      },
      "padding.pad_to_multiple_of: 8");
  // Padding to the longest text of a batch leaves one text as it is.
  json j = hf_tokenizer_test::tiny_tokenizer_json();
  j["truncation"] = nullptr;
  j["padding"] = {{"strategy", "BatchLongest"}, {"pad_to_multiple_of", nullptr}, {"pad_id", 0}};
  EXPECT_EQ(HfTokenizer::from_json(j.dump(), "padded").encode("the"), (Ids{116, 257}));
}

TEST(HfTokenizer, DeeplyNestedFileIsAnErrorNotACrash) {
  // A message that showed this value with dump() would recurse 200,000 deep.
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  expect_error("{\"pre_tokenizer\": " + deep + "}", "deeper than 64 levels");
}

TEST(HfTokenizer, ReadsOldStyleMergesAndGpt2Regex) {
  // Merges as "a b" strings (files before tokenizers 0.20) and a lone ByteLevel step with
  // its own GPT-2 regex: " 2024" is then one piece (" ?\p{N}+").
  json j = hf_tokenizer_test::tiny_tokenizer_json();
  for (json& m : j["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  const HfTokenizer tok = HfTokenizer::from_json(j.dump(), "gpt2-style");
  EXPECT_EQ(tok.encode("go there"), (Ids{103, 111, 258, 114, 101}));
  EXPECT_EQ(tok.encode("aaaaa"), (Ids{261, 262}));
}

TEST(HfTokenizer, IgnoreMergesTakesAPieceThatIsOneToken) {
  // Llama-3-style files set ignore_merges: a piece found whole in the vocabulary is that
  // token even when no merges lead to it.
  json j = hf_tokenizer_test::tiny_tokenizer_json();
  j["model"]["vocab"]["ab"] = 299;
  EXPECT_EQ(HfTokenizer::from_json(j.dump(), "merges").encode("ab"), (Ids{97, 98}));
  j["model"]["ignore_merges"] = true;
  const HfTokenizer tok = HfTokenizer::from_json(j.dump(), "ignore_merges");
  EXPECT_EQ(tok.encode("ab ab"), (Ids{299, 32, 97, 98}));
  EXPECT_EQ(tok.encode("hello"), (Ids{257, 260}));
}

TEST(HfTokenizer, MissingFileIsOneClearError) {
  EXPECT_THROW(HfTokenizer::from_file("/nonexistent/tokenizer.json"), cg::Error);
}

}  // namespace
