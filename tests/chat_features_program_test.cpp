// Why this file exists: `chunkgrad features` with chat data end to end: conversations in
// both chat forms and pre-tokenized lines from several files, rendered and tokenized with
// the target folder's tokenizer.json (or --tokenizer), bad lines counted or (--strict) one
// error line, and each sample's dataset in the index. The target is a tiny random Hugging
// Face Qwen3 folder made here whose vocabulary covers the golden tokenizer's.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "nn/checkpoint.h"
#include "nn/qwen3.h"
#include "train/chat_data.h"
#include "train/hf_tokenizer.h"
#include "train/offline_features.h"
#include "train_program_fixture.h"

namespace {

namespace fs = std::filesystem;
using train_program_fixture::slurp;

class ChatFeaturesProgram : public ::testing::Test {
 protected:
  static fs::path& root() {
    static fs::path p =
        fs::temp_directory_path() / ("chunkgrad_chat_features_" + std::to_string(::getpid()));
    return p;
  }
  static std::string at(const std::string& name) { return (root() / name).string(); }
  static std::string tokenizer_path() {
    return std::string(CHUNKGRAD_GOLDEN_DIR) + "/tokenizer/tokenizer.json";
  }
  static train_program_fixture::TrainRun cli(const std::string& args) {
    // Two decoder layers: too few for the default layer rule, so --layers 1 always.
    const std::string cmd = std::string("CHUNKGRAD_NUM_THREADS=1 '") + CHUNKGRAD_CLI + "' " + args +
                            " --layers 1 >'" + at("out") + "' 2>'" + at("err") + "'";
    const int status = std::system(cmd.c_str());
    train_program_fixture::TrainRun r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(at("out"));
    r.err = slurp(at("err"));
    return r;
  }
  static void write(const std::string& name, const std::string& text) {
    std::ofstream(at(name)) << text;
  }
  // A tiny random Qwen3 in the Hugging Face layout; with the golden tokenizer beside it
  // when `with_tokenizer`.
  static void make_target(const std::string& name, bool with_tokenizer) {
    fs::create_directories(at(name));
    const nlohmann::json config = {{"architectures", {"Qwen3ForCausalLM"}},
                                   {"model_type", "qwen3"},
                                   {"vocab_size", 1024},
                                   {"hidden_size", 32},
                                   {"num_hidden_layers", 2},
                                   {"num_attention_heads", 4},
                                   {"num_key_value_heads", 2},
                                   {"head_dim", 16},
                                   {"intermediate_size", 64},
                                   {"rope_theta", 1000000.0},
                                   {"rms_norm_eps", 1e-6},
                                   {"tie_word_embeddings", false},
                                   {"hidden_act", "silu"},
                                   {"max_position_embeddings", 512}};
    write(name + "/config.json", config.dump(2));
    cg::Generator gen(7);
    cg::nn::Qwen3ForCausalLM lm(cg::nn::Qwen3Config::from_hf_json(config),
                                cg::nn::InitOptions{.generator = &gen});
    cg::nn::save_checkpoint(lm, at(name + "/model.safetensors"));
    if (with_tokenizer) fs::copy_file(tokenizer_path(), at(name + "/tokenizer.json"));
  }
  static void SetUpTestSuite() {
    fs::remove_all(root());
    fs::create_directories(root());
    make_target("hf", true);
    make_target("bare", false);
    const auto m = [](const std::string& q, const std::string& a) {
      return nlohmann::json{
          {"messages",
           {{{"role", "user"}, {"content", q}}, {{"role", "assistant"}, {"content", a}}}}}
          .dump();
    };
    write(
        "chat.jsonl",
        m("What is 2 + 2?", "4.") + "\n" + m("Name a colour.", "Blue.") + "\n" +
            R"({"messages": [{"role": "user", "content": "no answer"}]})" + "\n" +
            R"({"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}], "dataset": "share"})" +
            "\n");
    write("pre.jsonl", R"({"input_ids": [5, 6, 7, 8], "loss_mask": [0, 0, 1, 1]})"
                       "\n");
  }
  static void TearDownTestSuite() { fs::remove_all(root()); }
};

TEST_F(ChatFeaturesProgram, ChatAndPreTokenizedFilesWithDatasetNames) {
  const auto r = cli("features --target '" + at("hf") + "' --data '" + at("chat.jsonl") +
                     "' --data '" + at("pre.jsonl") + "' --out '" + at("f") + "' --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("features: 4 samples"), std::string::npos) << r.out;
  // The bad line is said even without progress.
  EXPECT_NE(r.err.find("chat.jsonl: 3 samples; 1 bad line skipped (first: line 3: no assistant "
                       "turn"),
            std::string::npos)
      << r.err;
  const nlohmann::json index = nlohmann::json::parse(slurp(at("f/index.json")));
  EXPECT_EQ(index["dataset_names"], nlohmann::json({"chat", "share", "pre"}));
  EXPECT_EQ(index["sample_datasets"], nlohmann::json({0, 0, 1, 2}));
  // The samples on disk are the reader's: the template's text through the tokenizer.
  const auto tok = cg::train::HfTokenizer::from_file(tokenizer_path());
  const cg::train::ChatData expected = cg::train::read_chat_data(
      {at("chat.jsonl"), at("pre.jsonl")}, {.encode = cg::train::hf_encoder(tok)});
  cg::train::OfflineFeatureSource source(at("f"));
  ASSERT_EQ(source.sequences().size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(source.sequences()[i].ids, expected.samples[i].sequence.ids) << i;
    EXPECT_EQ(source.sequences()[i].loss_mask, expected.samples[i].sequence.loss_mask) << i;
  }
  EXPECT_EQ(tok.decode(source.sequences()[0].ids),
            "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
            "</think>\n\n4.<|im_end|>\n");
}

TEST_F(ChatFeaturesProgram, StrictAndMissingTokenizerAreOneErrorLine) {
  const auto expect_error = [](const train_program_fixture::TrainRun& r, const std::string& what) {
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.err.rfind("chunkgrad features: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << what << " in: " << r.err;
  };
  expect_error(cli("features --target '" + at("hf") + "' --data '" + at("chat.jsonl") +
                   "' --out '" + at("s") + "' --strict"),
               at("chat.jsonl") + ":3: no assistant turn");
  // No tokenizer.json beside the target: chat lines say to give one; with it they read.
  expect_error(cli("features --target '" + at("bare") + "' --data '" + at("chat.jsonl") +
                   "' --out '" + at("t") + "' --strict"),
               "give --tokenizer FILE");
  const auto r = cli("features --target '" + at("bare") + "' --data '" + at("chat.jsonl") +
                     "' --tokenizer '" + tokenizer_path() + "' --out '" + at("t2") + "'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Pre-tokenized lines need none.
  EXPECT_EQ(cli("features --target '" + at("bare") + "' --data '" + at("pre.jsonl") + "' --out '" +
                at("t3") + "'")
                .exit_code,
            0);
}

// A size in config.json that is not an integer is one line naming the folder, the field and
// the value (it was truncated: vocab_size 1024.5 built a model of 1024).
TEST_F(ChatFeaturesProgram, ANonIntegerConfigSizeIsOneErrorLine) {
  fs::create_directories(at("half"));
  fs::copy(at("hf"), at("half"), fs::copy_options::recursive | fs::copy_options::skip_existing);
  nlohmann::json config = nlohmann::json::parse(slurp(at("half/config.json")));
  config["vocab_size"] = 1024.5;
  write("half/config.json", config.dump());
  const auto r = cli("features --target '" + at("half") + "' --data '" + at("pre.jsonl") +
                     "' --out '" + at("h") + "'");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("--target " + at("half") +
                       ": Qwen3Config: config.json has vocab_size = "
                       "1024.5; it must be an integer"),
            std::string::npos)
      << r.err;
}

// Note [Chat template check]: a target folder whose chat template is not the Qwen3 one is
// one error line naming its tokenizer_config.json and the flag; with the flag the features
// are written and a warning says what was rendered; pre-tokenized data is never refused.
// The golden Qwen3 template beside the tokenizer says nothing.
TEST_F(ChatFeaturesProgram, AnotherChatTemplateIsOneErrorLineOrWithTheFlagAWarning) {
  const std::string qwen3 =
      slurp(std::string(CHUNKGRAD_GOLDEN_DIR) + "/tokenizer/qwen3_chat_template.jinja");
  make_target("qwen3_template", true);
  write("qwen3_template/tokenizer_config.json", nlohmann::json{{"chat_template", qwen3}}.dump());
  make_target("other_template", true);
  write("other_template/tokenizer_config.json",
        nlohmann::json{{"chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}"}}
            .dump());
  auto r = cli("features --target '" + at("qwen3_template") + "' --data '" + at("chat.jsonl") +
               "' --out '" + at("k") + "' --no-progress");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("chat template"), std::string::npos) << r.err;
  r = cli("features --target '" + at("other_template") + "' --data '" + at("chat.jsonl") +
          "' --out '" + at("m") + "'");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("chunkgrad features: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const std::string& word :
       {at("other_template") + "/tokenizer_config.json", std::string("not the Qwen3 template"),
        std::string("--allow-chat-template-mismatch"), at("chat.jsonl") + ":1 is a conversation"})
    EXPECT_NE(r.err.find(word), std::string::npos) << word << " in: " << r.err;
  EXPECT_FALSE(fs::exists(at("m/index.json")));
  r = cli("features --target '" + at("other_template") + "' --data '" + at("chat.jsonl") +
          "' --out '" + at("m2") + "' --no-progress --allow-chat-template-mismatch");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: the chat template in " + at("other_template")), std::string::npos)
      << r.err;
  r = cli("features --target '" + at("other_template") + "' --data '" + at("pre.jsonl") +
          "' --out '" + at("m3") + "' --no-progress");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("chat template"), std::string::npos) << r.err;
}

}  // namespace
