// Why this file exists: `chunkgrad tokenize` end to end on the hand-built tokenizer of
// hf_tokenizer_test_util.h: the output formats (one JSON array for the whole input, one
// line per JSONL line, raw text back from --decode, stdin as "-") and one error line with
// exit code 1 for a bad line or a malformed tokenizer.json.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "hf_tokenizer_test_util.h"
#include "train_program_fixture.h"

namespace {

using Result = train_program_fixture::TrainRun;

class TokenizeProgram : public train_program_fixture::TrainProgram {
 protected:
  void SetUp() override {
    TrainProgram::SetUp();
    write("tokenizer.json", hf_tokenizer_test::tiny_tokenizer_json().dump());
  }
  std::string at(const std::string& name) const { return path(name); }
  // `chunkgrad tokenize --tokenizer <tokenizer> ARGS <stdin_file`.
  Result tokenize(const std::string& args, const std::string& stdin_file = "/dev/null",
                  const std::string& tokenizer = "tokenizer.json") const {
    return run("tokenize --tokenizer '" + path(tokenizer) + "' " + args + " <'" + stdin_file + "'");
  }
};

TEST_F(TokenizeProgram, WholeInputIsOneArray) {
  write("text.txt", "<|im_start|>the\n hello");
  Result r = tokenize(at("text.txt"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // "the" "\n" " hello": the last piece has no merge with its Ġ, then he, llo.
  EXPECT_EQ(r.out, "[300,116,257,10,32,257,260]\n");
  r = tokenize("-", at("text.txt"));  // the same through stdin
  EXPECT_EQ(r.out, "[300,116,257,10,32,257,260]\n");
}

TEST_F(TokenizeProgram, DecodeGivesTheBytesBack) {
  write("ids.json", "[300, 116, 257, 10, 32, 257, 260]\n");
  Result r = tokenize("--decode " + at("ids.json"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<|im_start|>the\n hello");  // no newline added
}

TEST_F(TokenizeProgram, JsonlIsOneLineEach) {
  write("texts.jsonl", "\"the\"\n\" the\"\r\n\"\"\n\"a\\r\\nb<|im_end|>\"\n");
  Result r = tokenize("--jsonl " + at("texts.jsonl"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[116,257]\n[258]\n[]\n[97,13,10,98,301]\n");
  write("ids.jsonl", "[116,257]\n[258]\n[]\n[97,13,10,98,301]\n[195]\n");
  r = tokenize("--jsonl --decode " + at("ids.jsonl"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Half a character (byte C3 alone) is U+FFFD in JSON.
  EXPECT_EQ(r.out, "\"the\"\n\" the\"\n\"\"\n\"a\\r\\nb<|im_end|>\"\n\"\xEF\xBF\xBD\"\n");
}

TEST_F(TokenizeProgram, BadInputIsOneErrorLine) {
  write("bad.jsonl", "\"fine\"\n[1, 2]\n");
  Result r = tokenize("--jsonl " + at("bad.jsonl"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "[102,105,110,101]\n");
  EXPECT_NE(r.err.find("chunkgrad tokenize: error: line 2: expected a JSON string"),
            std::string::npos)
      << r.err;
  write("bad_ids.json", "[116, 9999]");
  r = tokenize("--decode " + at("bad_ids.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("the input: token id 9999 is not in the tokenizer's vocabulary"),
            std::string::npos)
      << r.err;
  write("latin1.txt", "caf\xE9");
  r = tokenize(at("latin1.txt"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not valid UTF-8 (at byte 3)"), std::string::npos) << r.err;

  nlohmann::json broken = hf_tokenizer_test::tiny_tokenizer_json();
  broken["model"]["merges"][0] = nlohmann::json::array({"q", "zzz"});
  write("broken.json", broken.dump());
  r = tokenize(at("latin1.txt"), "/dev/null", "broken.json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("model.merges[0]: 'zzz' is not in model.vocab"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

}  // namespace
