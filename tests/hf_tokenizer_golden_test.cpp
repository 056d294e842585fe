// Why this file exists: HfTokenizer must give the ids Hugging Face `tokenizers` gives, or
// a drafter trains on text its target never saw. tests/golden/make_tokenizer_golden.py
// (run on the device, which has tokenizers 0.23) trains a small byte-level BPE with the
// Qwen split regex and NFC, and writes its tokenizer.json and, for each hard string, the
// ids and the decode `tokenizers` gives (tests/golden/tokenizer/cases.jsonl). Skips when
// those files are absent.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "train/hf_tokenizer.h"

namespace {

const std::string kDir = std::string(CHUNKGRAD_GOLDEN_DIR) + "/tokenizer";

TEST(HfTokenizerGolden, IdsAndDecodeEqualHuggingFace) {
  const std::string tokenizer = kDir + "/tokenizer.json", cases = kDir + "/cases.jsonl";
  if (!std::filesystem::exists(tokenizer) || !std::filesystem::exists(cases))
    GTEST_SKIP() << "no goldens in " << kDir
                 << " (make them with tests/golden/make_tokenizer_golden.py)";
  const auto tok = cg::train::HfTokenizer::from_file(tokenizer);
  std::ifstream in(cases);
  std::string line;
  int count = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json c = nlohmann::json::parse(line);
    const std::string text = c.at("text").get<std::string>();
    const auto expected = c.at("ids").get<std::vector<int64_t>>();
    const std::string name = c.value("name", "case " + std::to_string(count));
    EXPECT_EQ(tok.encode(text), expected) << name << ": " << text.substr(0, 200);
    EXPECT_EQ(tok.decode(expected), c.at("decoded").get<std::string>()) << name;
    if (c.contains("decoded_skip_special"))
      EXPECT_EQ(tok.decode(expected, /*skip_special=*/true),
                c.at("decoded_skip_special").get<std::string>())
          << name;
    ++count;
  }
  EXPECT_GT(count, 10) << cases << " holds too few cases";
  for (const char* special : {"<|im_start|>", "<|im_end|>", "<|endoftext|>"})
    EXPECT_TRUE(tok.token_to_id(special).has_value()) << special;
}

}  // namespace
