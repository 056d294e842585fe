// Why this file exists: `chunkgrad regenerate` end to end on the committed tiny Hugging Face
// Qwen3 checkpoint (tests/data/qwen3_tiny_untied): the output's lines, their independence
// of --batch-size, a rerun that continues instead of starting over, and bad options as one
// error line with exit 1; and on the tiny Qwen3.5 (hybrid) golden target, transformers'
// greedy tokens. Runs the built program (tests/CMakeLists.txt passes its path).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "nn/safetensors.h"
#include "nn_test_util.h"

namespace {

namespace fs = std::filesystem;
using cg::testing_nn::read_bytes;
using cg::testing_nn::TempDir;
using cg::testing_nn::write_bytes;

struct ProgramRun {
  int exit_code = -1;
  std::string out, err;
};

class RegenerateProgram : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(target() + "/model.safetensors")) GTEST_SKIP() << "no tiny checkpoint";
    std::string text;
    for (int i = 0; i < 6; ++i) {
      nlohmann::json j;
      std::vector<int64_t> ids;
      std::vector<int> mask;
      for (int k = 0; k < 3 + 2 * i; ++k) {  // prompts of 3 .. 13 tokens
        ids.push_back((17 * i + 5 * k + 1) % 256);
        mask.push_back(0);
      }
      ids.insert(ids.end(), {9, 9, 9});
      mask.insert(mask.end(), {1, 1, 1});
      j["input_ids"] = ids;
      j["loss_mask"] = mask;
      j["dataset"] = i % 2 ? "odd" : "even";
      text += j.dump() + "\n";
    }
    write_bytes(dir.file("d.jsonl"), text);
  }
  static std::string target() {
    return std::string(CHUNKGRAD_TEST_DATA_DIR) + "/qwen3_tiny_untied";
  }
  ProgramRun cli(const std::string& args) {
    const std::string cmd = std::string("CHUNKGRAD_NUM_THREADS=1 '") + CHUNKGRAD_CLI +
                            "' regenerate " + args + " >'" + dir.file("stdout") + "' 2>'" +
                            dir.file("stderr") + "'";
    const int status = std::system(cmd.c_str());
    ProgramRun r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = read_bytes(dir.file("stdout"));
    r.err = read_bytes(dir.file("stderr"));
    return r;
  }
  std::string base(const std::string& out, const std::string& eos = "3,200") {
    return base_at(dir.file(out), eos);
  }
  std::string base_at(const std::string& out_path, const std::string& eos = "3,200") {
    return "--target '" + target() + "' --data '" + dir.file("d.jsonl") + "' --out '" + out_path +
           "' --max-new-tokens 8 --eos-ids " + eos + " --no-progress";
  }
  void expect_error(const std::string& args, const std::string& words) {
    const ProgramRun r = cli(args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(words), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  TempDir dir;
};

TEST_F(RegenerateProgram, WritesTheTargetsResponsesWhateverTheBatchSize) {
  const ProgramRun a = cli(base("a.jsonl") + " --batch-size 4");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.out.find("6 samples written"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("new tokens/s"), std::string::npos) << a.out;
  const ProgramRun b = cli(base("b.jsonl") + " --batch-size 1");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(read_bytes(dir.file("a.jsonl")), read_bytes(dir.file("b.jsonl")));
  std::istringstream lines(read_bytes(dir.file("a.jsonl")));
  std::string line;
  int n = 0;
  for (; std::getline(lines, line); ++n) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["source_line"], n + 1);
    EXPECT_EQ(j["dataset"], n % 2 ? "odd" : "even");
    const size_t prompt = 3 + 2 * static_cast<size_t>(n);
    ASSERT_GT(j["input_ids"].size(), prompt);
    EXPECT_LE(j["input_ids"].size(), prompt + 8);
    EXPECT_EQ(j["loss_mask"][prompt - 1], 0);
    EXPECT_EQ(j["loss_mask"][prompt], 1);
    EXPECT_EQ(j["loss_mask"].size(), j["input_ids"].size());
  }
  EXPECT_EQ(n, 6);
  // --limit 2 on a fresh output, then a rerun without it continues after those two.
  ASSERT_EQ(cli(base("c.jsonl") + " --limit 2").exit_code, 0);
  const ProgramRun rest = cli(base("c.jsonl") + " --batch-size 3");
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_NE(rest.out.find("4 samples written (2 already there)"), std::string::npos) << rest.out;
  EXPECT_EQ(read_bytes(dir.file("c.jsonl")), read_bytes(dir.file("a.jsonl")));
  // Another --max-new-tokens would mix two settings in one file: refused.
  expect_error("--target '" + target() + "' --data '" + dir.file("d.jsonl") + "' --out '" +
                   dir.file("a.jsonl") + "' --max-new-tokens 5 --eos-ids 3,200 --no-progress",
               "max_new_tokens = 8");
}

// An outside tester: a pre-tokenized line without loss_mask was refused ("the response
// (loss_mask = 1) starts at the first token") though it named no response. Now the whole
// line is the prompt, as eval reads it, and the response is appended after it.
TEST_F(RegenerateProgram, ALineWithoutALossMaskIsAPrompt) {
  write_bytes(dir.file("p.jsonl"), "{\"input_ids\": [5, 6, 7, 8]}\n");
  const ProgramRun r =
      cli("--target '" + target() + "' --data '" + dir.file("p.jsonl") + "' --out '" +
          dir.file("p_out.jsonl") + "' --max-new-tokens 4 --eos-ids 3 --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(read_bytes(dir.file("p_out.jsonl")));
  ASSERT_GT(j["input_ids"].size(), 4u);
  EXPECT_EQ(j["input_ids"][3], 8);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(j["loss_mask"][k], 0) << k;
  EXPECT_EQ(j["loss_mask"][4], 1);
}

TEST_F(RegenerateProgram, BadOptionsAreOneErrorLine) {
  expect_error(base("x.jsonl") + " --top-k 5", "need --temperature > 0");
  expect_error(base("x.jsonl") + " --top-p 0", "--top-p");
  expect_error(base("x.jsonl") + " --max-new-tokens 0", "--max-new-tokens");
  expect_error(base("x.jsonl") + " --batch-size 0", "--batch-size");
  expect_error(base("x.jsonl", "3,,4"), "--eos-ids");
  expect_error(base("x.jsonl", "999"), "outside the target's vocabulary");
  expect_error(base("x.jsonl") + " --dtype f16", "--dtype");
  expect_error(base_at(dir.str()), "is a folder");
  expect_error(base_at(dir.file("no/x.jsonl")), "does not exist");
  // An unwritable place (even root cannot make files in /proc) is refused before the
  // target loads, with the reason.
  expect_error(base_at("/proc/chunkgrad_regenerate.jsonl"),
               "--out /proc/chunkgrad_regenerate.jsonl: cannot create files in /proc");
  // The tiny checkpoint's config names no eos_token_id.
  expect_error("--target '" + target() + "' --data '" + dir.file("d.jsonl") + "' --out '" +
                   dir.file("x.jsonl") + "'",
               "pass --eos-ids");
  write_bytes(dir.file("bad.jsonl"), "{\"input_ids\": [1, 2], \"loss_mask\": [0, 0]}\n");
  expect_error("--target '" + target() + "' --data '" + dir.file("bad.jsonl") + "' --out '" +
                   dir.file("x.jsonl") + "' --eos-ids 3",
               "bad.jsonl:1: loss_mask has no 1");
  EXPECT_FALSE(fs::exists(dir.file("x.jsonl")));
}

// A Qwen3.5 target (Gated DeltaNet + gated attention): the tiny text-only folder
// transformers wrote (tests/golden/qwen3_5, qwen3_5_golden_test.cpp). Its 70-token golden
// prompt comes back with transformers' own 12 greedy tokens, in a ragged batch with shorter
// prompts (the DeltaNet states copied at each rebuild), and the file does not depend on
// --batch-size.
class RegenerateQwen35Program : public RegenerateProgram {
 protected:
  void SetUp() override {
    if (!fs::exists(qwen35() + "/config.json") || !fs::exists(qwen35() + "_hidden.safetensors"))
      GTEST_SKIP() << "no " << qwen35();
    const auto golden = cg::safetensors::open(qwen35() + "_hidden.safetensors");
    for (double v : golden->load("gen.prompt").to_vector()) prompt.push_back(int64_t(v));
    for (double v : golden->load("gen.greedy").to_vector()) greedy.push_back(int64_t(v));
    std::string text;
    for (size_t cut : {size_t{0}, size_t{9}, size_t{66}, size_t{31}}) {  // 70, 61, 4, 39 tokens
      nlohmann::json j;
      std::vector<int64_t> ids(prompt.begin(), prompt.end() - static_cast<int64_t>(cut));
      std::vector<int> mask(ids.size(), 0);
      ids.insert(ids.end(), {9, 9});
      mask.insert(mask.end(), {1, 1});
      j["input_ids"] = ids;
      j["loss_mask"] = mask;
      text += j.dump() + "\n";
    }
    write_bytes(dir.file("q.jsonl"), text);
  }
  static std::string qwen35() {
    return std::string(CHUNKGRAD_TEST_DATA_DIR) + "/../golden/qwen3_5/tiny_qwen3_5_text";
  }
  std::string args(const std::string& out, int batch) {
    return "--target '" + qwen35() + "' --data '" + dir.file("q.jsonl") + "' --out '" +
           dir.file(out) + "' --max-new-tokens 12 --eos-ids 1023 --no-progress --batch-size " +
           std::to_string(batch);
  }
  std::vector<int64_t> prompt, greedy;
};

TEST_F(RegenerateQwen35Program, RespondsAsTransformersWhateverTheBatchSize) {
  ASSERT_EQ(prompt.size(), 70u);
  ASSERT_EQ(greedy.size(), 12u);
  ASSERT_EQ(std::count(greedy.begin(), greedy.end(), 1023), 0);
  const ProgramRun a = cli(args("a.jsonl", 3));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.out.find("4 samples written"), std::string::npos) << a.out;
  const ProgramRun b = cli(args("b.jsonl", 1));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(read_bytes(dir.file("a.jsonl")), read_bytes(dir.file("b.jsonl")));
  std::istringstream lines(read_bytes(dir.file("a.jsonl")));
  std::string first;
  ASSERT_TRUE(std::getline(lines, first));
  std::vector<int64_t> want = prompt;
  want.insert(want.end(), greedy.begin(), greedy.end());
  EXPECT_EQ(nlohmann::json::parse(first)["input_ids"].get<std::vector<int64_t>>(), want);
}

}  // namespace
