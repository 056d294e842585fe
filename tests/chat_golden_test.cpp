// Why this file exists: chunkgrad renders chat data itself (train/chat_data.h), and a drafter
// trained on a rendering that differs from the serving engine's by one byte learns text the
// target never sees. tests/golden/make_chat_golden.py (run on the device, transformers 5.17)
// renders hard conversations with Hugging Face's apply_chat_template, the Qwen3 template and
// thinking off, tokenizes them with the golden tokenizer, and renders each conversation's
// prompt as a serving engine does (add_generation_prompt, thinking off); this compares
// chunkgrad's text, ids and mask with them (tests/golden/chat/cases.jsonl). Skips when the
// goldens are absent.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "train/chat_data.h"
#include "train/hf_tokenizer.h"

namespace {

const std::string kDir = std::string(CHUNKGRAD_GOLDEN_DIR);

std::vector<cg::train::ChatMessage> messages_of(const nlohmann::json& list) {
  std::vector<cg::train::ChatMessage> out;
  for (const auto& m : list) {
    cg::train::ChatMessage msg{m.at("role").get<std::string>(), m.at("content").get<std::string>(),
                               std::nullopt};
    if (m.contains("reasoning_content")) msg.reasoning = m["reasoning_content"].get<std::string>();
    out.push_back(std::move(msg));
  }
  return out;
}

TEST(ChatGolden, TextIdsAndMaskEqualHuggingFace) {
  const std::string tokenizer = kDir + "/tokenizer/tokenizer.json";
  const std::string cases = kDir + "/chat/cases.jsonl";
  if (!std::filesystem::exists(cases))
    GTEST_SKIP() << "no goldens in " << cases
                 << " (make them with tests/golden/make_chat_golden.py)";
  const auto tok = cg::train::HfTokenizer::from_file(tokenizer);
  const cg::train::ChatDataOptions options{.encode = cg::train::hf_encoder(tok),
                                           .vocab_size = tok.vocab_size()};
  std::ifstream in(cases);
  std::string line;
  int count = 0, prompt_checks = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json c = nlohmann::json::parse(line);
    const std::string name = c.at("name").get<std::string>();
    const std::string text = c.at("text").get<std::string>();
    const auto ids = c.at("ids").get<std::vector<int64_t>>();
    const cg::train::RenderedChat r = cg::train::render_qwen3_chat(messages_of(c.at("messages")));
    EXPECT_EQ(r.text, text) << name;
    EXPECT_EQ(tok.encode(text), ids) << name;
    // The reader's path: a "messages" line of the same conversation.
    const auto sample = cg::train::parse_chat_line(
        nlohmann::json{{"messages", c.at("messages")}}.dump(), "golden.jsonl", 1, options);
    ASSERT_TRUE(sample.has_value()) << name;
    const cg::train::DrafterSequence& s = sample->sequence;
    EXPECT_EQ(s.ids, ids) << name;
    ASSERT_EQ(s.loss_mask.size(), ids.size()) << name;
    EXPECT_EQ(s.loss_mask.back(), 0) << name << ": the \\n after the last <|im_end|>";
    // Where the serving prompt's ids are a prefix of the ids (not so when the answer
    // starts with whitespace that merges with the prompt's last newlines), the last answer
    // is learned from exactly the token after the prompt to its <|im_end|>.
    const auto prompt = c.value("prompt_ids", std::vector<int64_t>());
    if (!prompt.empty() && prompt.size() < ids.size() &&
        text.starts_with(c["prompt_text"].get<std::string>()) &&
        std::equal(prompt.begin(), prompt.end(), ids.begin())) {
      EXPECT_EQ(s.loss_mask[prompt.size() - 1], 0) << name;
      for (size_t i = prompt.size(); i + 1 < ids.size(); ++i)
        EXPECT_EQ(s.loss_mask[i], 1) << name << " token " << i;
      ++prompt_checks;
    }
    ++count;
  }
  EXPECT_GE(count, 25) << cases << " holds too few cases";
  EXPECT_GE(prompt_checks, 10);
}

}  // namespace
