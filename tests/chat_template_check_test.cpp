// Why this file exists: chunkgrad renders conversations with its own Qwen3 template and
// never read the target folder's (an outside tester's report). These tests pin Note [Chat
// template check] (train/chat_template_check.h): the golden folders' template is the known
// one, another is a mismatch naming the file and the flag, the template is found where
// transformers finds it, and the reader refuses (or warns about) conversation lines only.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tests/error_helpers.h"
#include "tests/nn_test_util.h"
#include "train/chat_data.h"
#include "train/chat_template_check.h"
#include "train/hf_tokenizer.h"

namespace {

namespace fs = std::filesystem;
using namespace cg::train;

const std::string kGolden = CHUNKGRAD_GOLDEN_DIR;

using cg::testing_nn::read_bytes;

// A fresh folder per test (tests/nn_test_util.h), where a test writes a target's files.
class ChatTemplateCheckTest : public ::testing::Test {
 protected:
  std::string at(const std::string& name) const { return dir_.file(name); }
  void write(const std::string& name, const std::string& text) const {
    cg::testing_nn::write_bytes(at(name), text);
  }
  cg::testing_nn::TempDir dir_;
};

const std::string& qwen3_template() {
  static const std::string t = read_bytes(kGolden + "/tokenizer/qwen3_chat_template.jinja");
  return t;
}

TEST_F(ChatTemplateCheckTest, TheGoldenFoldersHoldTheKnownTemplate) {
  ASSERT_FALSE(qwen3_template().empty());
  const auto& known = known_chat_template_hashes();
  EXPECT_NE(std::find(known.begin(), known.end(), chat_template_hash(qwen3_template())),
            known.end());
  for (const char* folder : {"tiny_qwen3", "qwen3_5/tiny_qwen3_5", "qwen3_5/tiny_qwen3_5_text",
                             "qwen3_5/tiny_qwen3_5_moe"}) {
    const ChatTemplateCheck c = check_chat_template(kGolden + "/" + folder, "--allow");
    EXPECT_FALSE(c.mismatch) << folder << ": " << c.problem;
    EXPECT_EQ(c.problem, "") << folder;
  }
  // tokenizer_config.json keeps the text without its last newline, and Windows line ends
  // are the same template.
  std::string crlf;
  for (char ch : qwen3_template()) crlf += ch == '\n' ? std::string("\r\n") : std::string(1, ch);
  EXPECT_EQ(chat_template_hash(crlf), chat_template_hash(qwen3_template()));
}

TEST_F(ChatTemplateCheckTest, AnotherTemplateIsAMismatchNamingTheFileAndTheFlag) {
  // One byte changed: thinking on by default is another rendering.
  std::string other = qwen3_template();
  other.replace(other.find("enable_thinking is false"), 24, "enable_thinking is true ");
  write("tokenizer_config.json", nlohmann::json{{"chat_template", other}}.dump());
  ChatTemplateCheck c = check_chat_template(dir_.str(), "--allow-chat-template-mismatch");
  EXPECT_TRUE(c.mismatch);
  EXPECT_NE(c.problem.find(at("tokenizer_config.json")), std::string::npos) << c.problem;
  EXPECT_NE(c.problem.find("--allow-chat-template-mismatch"), std::string::npos) << c.problem;
  EXPECT_NE(c.problem.find("not the Qwen3 template"), std::string::npos) << c.problem;
  // chat_template.jinja wins over tokenizer_config.json, as in transformers.
  write("chat_template.jinja", qwen3_template());
  c = check_chat_template(dir_.str(), "--allow");
  EXPECT_FALSE(c.mismatch) << c.problem;
  fs::remove(at("chat_template.jinja"));
  // The list form: the "default" entry is the one apply_chat_template uses.
  write("tokenizer_config.json",
        nlohmann::json{{"chat_template",
                        {{{"name", "tool_use"}, {"template", "{{ x }}"}},
                         {{"name", "default"}, {"template", qwen3_template()}}}}}
            .dump());
  EXPECT_FALSE(check_chat_template(dir_.str(), "--allow").mismatch);
  write(
      "tokenizer_config.json",
      nlohmann::json{{"chat_template", {{{"name", "tool_use"}, {"template", "{{ x }}"}}}}}.dump());
  EXPECT_TRUE(check_chat_template(dir_.str(), "--allow").mismatch);
  write("tokenizer_config.json", R"({"chat_template": 3})");
  EXPECT_THROW(check_chat_template(dir_.str(), "--allow"), cg::Error);
}

TEST_F(ChatTemplateCheckTest, NoTemplateIsAWarningNotAMismatch) {
  const ChatTemplateCheck c = check_chat_template(dir_.str(), "--allow");
  EXPECT_FALSE(c.mismatch);
  EXPECT_NE(c.problem.find("has no chat template"), std::string::npos) << c.problem;
  write("tokenizer_config.json", R"({"eos_token": "<|im_end|>"})");
  EXPECT_FALSE(check_chat_template(dir_.str(), "--allow").mismatch);
}

// An outside tester: a folder named chat_template.jinja passed as "no template" (a warning
// and the Qwen3 rendering); transformers fails on it, and so does this now.
// A second tester: that error came for pre-tokenized data too (no template read), and a
// folder named tokenizer_config.json or a link to nothing still passed as "no template".
// Now each is a mismatch: an error where conversations are rendered, nothing otherwise.
TEST_F(ChatTemplateCheckTest, AFolderNamedLikeTheTemplateIsAMismatch) {
  fs::create_directories(at("chat_template.jinja"));
  ChatTemplateCheck c = check_chat_template(dir_.str(), "--allow");
  EXPECT_TRUE(c.mismatch);
  EXPECT_NE(c.problem.find("chat_template.jinja is not a file"), std::string::npos) << c.problem;
  EXPECT_NE(c.problem.find("--allow"), std::string::npos) << c.problem;
  fs::remove(at("chat_template.jinja"));
  fs::create_symlink(at("nowhere.jinja"), at("chat_template.jinja"));
  EXPECT_TRUE(check_chat_template(dir_.str(), "--allow").mismatch);
  fs::remove(at("chat_template.jinja"));
  fs::create_directories(at("tokenizer_config.json"));
  c = check_chat_template(dir_.str(), "--allow");
  EXPECT_TRUE(c.mismatch);
  EXPECT_NE(c.problem.find("tokenizer_config.json is not a file"), std::string::npos) << c.problem;
}

// The reader: only a conversation line meets the problem; as an error it is not a skipped
// bad line, even without strict.
TEST_F(ChatTemplateCheckTest, TheReaderRefusesOrWarnsForConversationsOnly) {
  static const HfTokenizer tok = HfTokenizer::from_file(kGolden + "/tokenizer/tokenizer.json");
  write("pre.jsonl", R"({"input_ids": [5, 6, 7]})"
                     "\n");
  write(
      "chat.jsonl",
      R"({"input_ids": [5, 6, 7]})"
      "\n"
      R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})"
      "\n");
  ChatDataOptions o{.encode = hf_encoder(tok)};
  o.template_problem = "the chat template in X is not the Qwen3 template";
  o.template_problem_is_error = true;
  ChatData pre = read_chat_data({at("pre.jsonl")}, o);
  EXPECT_EQ(pre.samples.size(), 1u);
  EXPECT_EQ(pre.template_warning, "");
  try {
    read_chat_data({at("chat.jsonl")}, o);
    ADD_FAILURE() << "a conversation was read under a template mismatch";
  } catch (const cg::Error& e) {
    EXPECT_NE(e.message().find(at("chat.jsonl") + ":2 is a conversation, but the chat template"),
              std::string::npos)
        << e.message();
  }
  o.template_problem_is_error = false;
  const ChatData warned = read_chat_data({at("chat.jsonl")}, o);
  EXPECT_EQ(warned.samples.size(), 2u);
  EXPECT_EQ(warned.template_warning, o.template_problem);
  EXPECT_FALSE(warned.samples[0].rendered);
  EXPECT_TRUE(warned.samples[1].rendered);
}

}  // namespace
